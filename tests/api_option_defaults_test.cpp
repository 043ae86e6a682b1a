// Every default the faces share: the C++ API's option structs hold what
// `tandem train` defaults to (the one declaration), field by field.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "tandem/tandem.hpp"
#include "tandem/trainer.hpp"
#include "train/option_keywords.hpp"

namespace tandem {
namespace {

nlohmann::json declared(std::string_view keyword) {
  const train::TrainOption* o = train::optionByKeyword(keyword);
  EXPECT_NE(o, nullptr) << keyword;
  return o ? train::keywordDefault(*o) : nlohmann::json();
}

using Fields = std::vector<std::pair<nlohmann::json, const char*>>;

void expectDeclared(const Fields& fields) {
  for (const auto& [value, keyword] : fields) EXPECT_EQ(value, declared(keyword)) << keyword;
}

TEST(OptionDefaults, InitOptionsHoldTheDeclaredDefaults) {
  const InitOptions o;
  expectDeclared({{o.rendezvous_timeout_s, "rendezvous_timeout_s"},
                  {o.peer_timeout_s, "peer_timeout_s"},
                  {o.bucket_mb, "bucket_mb"},
                  {o.wire_dtype, "wire_dtype"},
                  {o.error_feedback, "error_feedback"},
                  {o.hierarchical, "hierarchical"}});
}

TEST(OptionDefaults, DistributedOptionsHoldTheDeclaredDefaults) {
  const DistributedOptions o;
  EXPECT_EQ(o.ps_chunk_mb, 0.0);  // from the model, as `tandem train` sizes chunks (was 4 MiB)
  expectDeclared({{o.ps_chunk_mb, "ps_chunk_mb"},
                  {o.local_steps, "local_steps"},
                  {o.outer_optimizer, "outer_optimizer"},
                  {o.outer_lr, "outer_lr"},
                  {o.outer_momentum, "outer_momentum"},
                  {o.push_bits, "push_bits"},
                  {o.delay_compensation, "delay_compensation"}});
}

TEST(OptionDefaults, TrainerOptionsHoldTheDeclaredDefaults) {
  const TrainerOptions o;
  expectDeclared({{o.batch_size, "batch_size"},
                  {o.max_steps, "max_steps"},
                  {o.epochs, "epochs"},
                  {o.optimizer, "optimizer"},
                  {o.lr, "lr"},
                  {o.seed, "seed"},
                  {o.out_dir, "out_dir"},
                  {o.eval_every_steps, "eval_every_steps"},
                  {o.log_every_steps, "log_every_steps"},
                  {o.checkpoint_every_steps, "checkpoint_every_steps"},
                  {o.ps_mode, "ps_mode"},
                  {o.staleness, "staleness"},
                  {o.peer_timeout_s, "peer_timeout_s"},
                  {o.rendezvous_timeout_s, "rendezvous_timeout_s"}});
}

}  // namespace
}  // namespace tandem
