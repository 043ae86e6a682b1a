// `tandem train`'s flags, parsed in-process: what each becomes in the run
// config, and the errors that name a bad one. (The process tests keep one
// case each, for the binary's exit code and message.)
#include "cli/train_flags.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "cli/arg_style.hpp"
#include "core/error.hpp"
#include "support/expect_input_error.hpp"

namespace tandem::cli {
namespace {

// Parses `args` as `tandem train` does, flag spelling included, and
// completes the config for the cluster the flags name (none: standalone).
train::TrainConfig parseTrain(const std::string& args) {
  CLI::App app;
  TrainFlags flags = addTrainFlags(*app.add_subcommand("train"));
  std::vector<std::string> words = {"tandem", "train"};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  const std::vector<std::string> spelled = normalizeFlagSpelling(static_cast<int>(argv.size()), argv.data());
  std::vector<const char*> normalized;
  for (const auto& w : spelled) normalized.push_back(w.c_str());
  app.parse(static_cast<int>(normalized.size()), normalized.data());
  applyTrainOptions(flags);
  const auto spec = cluster::resolveClusterSpec(*flags.cluster, {});
  completeTrainConfig(flags, spec);
  train::validate(*flags.config);
  return *flags.config;
}

const std::string kWithServers =
    " --worker-hosts 127.0.0.1:7000 --ps-hosts 127.0.0.1:7100 --job-name worker --task-index 0";

TEST(TrainFlags, EachValueLandsInItsRunConfigFieldByTheFieldsType) {
  const train::TrainConfig c = parseTrain(
      "--batch_size 32 --lr 0.1 --priority off --hierarchical off --lr-scaling linear --lr-boundaries 100,200 "
      "--lr-values 0.1,0.01,0.001 --lr-schedule piecewise --synthetic-shape 1x28x28 --augment --ps-mode async "
      "--seed 7 --mlp-widths 64 32 --out /tmp/x --amp bf16 --wire-dtype fp16 --lr-boundary-unit epoch "
      "--optimizer adamw" + kWithServers);
  EXPECT_EQ(c.batch_size, 32);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.1);
  EXPECT_EQ(c.distributed.priority, train::Switch::kOff);
  EXPECT_EQ(c.distributed.shared_memory, train::Switch::kOn);
  EXPECT_EQ(c.distributed.hierarchical, cluster::HostAggregation::kOff);
  EXPECT_EQ(c.lr.scaling, train::LrScaling::kLinear);
  EXPECT_EQ(c.lr.boundaries, (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(c.lr.values, (std::vector<double>{0.1, 0.01, 0.001}));
  EXPECT_EQ(c.dataset.synthetic_shape.channels, 1);
  EXPECT_EQ(c.dataset.synthetic_shape.width, 28);
  EXPECT_TRUE(c.dataset.augment);
  EXPECT_EQ(c.distributed.ps_mode, Mode::PsAsync);
  EXPECT_EQ(train::psModeOf(c.distributed), Mode::PsAsync);
  EXPECT_EQ(c.amp, train::Amp::kBf16);
  EXPECT_EQ(c.distributed.wire_dtype, WireDtype::kFloat16);
  EXPECT_EQ(c.lr.kind, train::LrScheduleKind::kPiecewise);
  EXPECT_EQ(c.lr.unit, train::LrUnit::kEpoch);
  EXPECT_EQ(c.optimizer.name, "adamw");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.model_options.mlp_widths, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(c.out_dir, "/tmp/x");
  const train::TrainConfig defaults = parseTrain("");
  EXPECT_EQ(defaults.batch_size, train::TrainConfig{}.batch_size);
  EXPECT_EQ(defaults.distributed.priority, train::Switch::kOn);
}

TEST(TrainFlags, MomentumAndWeightDecayDefaultByOptimizerUnlessGiven) {
  EXPECT_DOUBLE_EQ(parseTrain("").optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(parseTrain("--optimizer rmsprop").optimizer.momentum, 0.0);
  EXPECT_DOUBLE_EQ(parseTrain("--optimizer adamw").optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(parseTrain("--optimizer adam").optimizer.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(parseTrain("--optimizer rmsprop --momentum 0.5").optimizer.momentum, 0.5);
  EXPECT_DOUBLE_EQ(parseTrain("--optimizer adamw --weight-decay 0").optimizer.weight_decay, 0.0);
}

TEST(TrainFlags, BadValuesAreInputErrorsNamingTheFlag) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--ps-mode eventual" + kWithServers, {"--ps-mode", "sync or async", "'eventual'"}},
      {"--amp fp8", {"--amp", "off, bf16 or fp16", "'fp8'"}},
      {"--lr-schedule exponential", {"--lr-schedule", "constant, piecewise or cosine", "'exponential'"}},
      {"--lr-boundary-unit week", {"--lr-boundary-unit", "step or epoch", "'week'"}},
      {"--optimizer adagrad", {"--optimizer", "sgd, adam, adamw or rmsprop", "'adagrad'"}},
      {"--staleness -3" + kWithServers, {"--staleness", "-3"}},
      {"--ps-chunk-mb -1", {"--ps-chunk-mb"}},
      {"--ps-chunk-mb 65", {"--ps-chunk-mb", "64"}},
      {"--hierarchical sometimes", {"--hierarchical", "auto or off", "'sometimes'"}},
      {"--wire-dtype fp8", {"--wire-dtype", "fp32, fp16 or bf16", "'fp8'"}},
      {"--ps-threads -1", {"--ps-threads"}},
      {"--worker_hosts 127.0.0.1:1,127.0.0.1:x --job_name worker --task_index 0", {"--worker_hosts"}},
      {"--worker_hosts 127.0.0.1:1 --job_name worker --task_index 3", {"--task_index"}},
      {"--accumulate 0", {"--accumulate"}},
      {"--lr-scaling sqrt", {"--lr-scaling", "none or linear"}},
      {"--batch-size 1O", {"--batch-size", "'1O'", "integer"}},
      {"--lr fast", {"--lr", "number"}},
      {"--synthetic-shape 3x32", {"--synthetic-shape", "CxHxW"}},
      {"--max-steps 0", {"--max-steps", ">= 1"}},
  };
  for (const auto& [args, needles] : cases) {
    SCOPED_TRACE(args);
    testing::expectInputError([&] { parseTrain(args); }, needles);
  }
  EXPECT_THROW(parseTrain("--epochs 2 --max-steps 3"), CLI::ParseError) << "--max-steps excludes --epochs";
  EXPECT_THROW(parseTrain("--no-such-flag 1"), CLI::ParseError);
}

TEST(TrainFlags, AFlagThatWouldChangeNothingIsRefusedWhereItSelectsBehaviour) {
  testing::expectInputError([] { parseTrain("--ps-mode async"); }, {"--ps-mode", "parameter servers"});
  testing::expectInputError([] { parseTrain("--staleness 2"); }, {"--staleness", "parameter servers"});
  testing::expectInputError([] { parseTrain("--verify-replicas-every 1" + kWithServers); },
                            {"--verify-replicas-every", "all-reduce"});
  EXPECT_EQ(parseTrain("--verify-replicas-every 5 --worker-hosts 127.0.0.1:7000,127.0.0.1:7001 --job-name worker "
                       "--task-index 0")
                .distributed.verify_replicas_every,
            5);
  // Not strict: the same flags may go to a standalone run compared with a distributed one.
  EXPECT_DOUBLE_EQ(parseTrain("--ps-chunk-mb 0.01").distributed.ps_chunk_mb, 0.01);
}

}  // namespace
}  // namespace tandem::cli
