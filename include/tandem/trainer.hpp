#pragma once
// Tandem's own training loop over your model, data and loss: the loop of
// `tandem train` (prefetching, Tandem's fused optimizers or the parameter
// servers, learning-rate schedule, evaluation, checkpoints and exact resume,
// metrics.jsonl, TensorBoard events, the step breakdown), with the cluster
// read from the environment as `tandem train` reads it.
//
//   auto net = std::make_shared<Net>();
//   std::string summary = tandem::fit(net, [&](const torch::Tensor& x) { return net->forward(x); },
//                                       {x_train, y_train}, {x_test, y_test}, my_loss, {.max_steps = 500});
//
// Run it alone, or under `tandem launch --workers N [--ps K] -- ./program`:
// all-reduce without servers, the parameter servers with them. Do not call
// tandem::init() in the same process: fit() joins the job itself.
#include <torch/torch.h>

#include "tandem/mode.hpp"
#include "tandem/option_defaults.hpp"

#include <functional>
#include <optional>
#include <memory>
#include <string>

namespace tandem {

// Samples in memory: float32 inputs [N, ...] and int64 class indices [N].
struct TensorData {
  torch::Tensor inputs;
  torch::Tensor targets;
};

// The batch mean loss of the model's outputs against int64 targets [N].
using LossFn = std::function<torch::Tensor(const torch::Tensor& outputs, const torch::Tensor& targets)>;

// The fields `tandem train` also takes (--batch-size, ...) get their
// defaults and checks from the same declaration (option_default).
struct TrainerOptions {
  std::string name = "user-model";  // in logs, the summary and the workers' agreement check
  int64_t batch_size = option_default<int64_t>("batch_size");  // per worker
  // > 0: train this many steps instead of `epochs`
  int64_t max_steps = option_default<int64_t>("max_steps");
  int64_t epochs = option_default<int64_t>("epochs");
  std::string optimizer = option_default<std::string>("optimizer");  // sgd | adam | adamw | rmsprop
  double lr = option_default<double>("lr");
  // Unset: the optimizer's own default, as `tandem train` takes it:
  // momentum 0.9 for sgd and 0 for rmsprop; weight decay 0.01 for adamw, else 0.
  std::optional<double> momentum;      // sgd, rmsprop
  std::optional<double> weight_decay;
  uint64_t seed = option_default<uint64_t>("seed");  // data order
  std::string out_dir = option_default<std::string>("out_dir");
  bool overwrite = false;           // start again in a used out_dir instead of resuming from it
  int64_t eval_every_steps = option_default<int64_t>("eval_every_steps");  // 0: at every epoch end
  int64_t log_every_steps = option_default<int64_t>("log_every_steps");
  int64_t checkpoint_every_steps = option_default<int64_t>("checkpoint_every_steps");
  // with parameter servers: PsSync or PsAsync
  Mode ps_mode = option_default<Mode>("ps_mode");
  int staleness = option_default<int>("staleness");  // >= 0: bounded staleness instead
  double peer_timeout_s = option_default<double>("peer_timeout_s");
  double rendezvous_timeout_s = option_default<double>("rendezvous_timeout_s");
};

// Trains `module`, called through `forward`, on `train_data`; evaluates on
// `test_data` with the same `loss` (and accuracy, as argmax against the
// targets). Writes the run to options.out_dir and returns the summary (JSON
// text, as in out_dir/summary.json). Throws std::runtime_error subclasses
// naming the culprit: bad data or options, a peer that never came.
std::string fit(std::shared_ptr<torch::nn::Module> module,
                  std::function<torch::Tensor(const torch::Tensor&)> forward, const TensorData& train_data,
                  const TensorData& test_data, LossFn loss, const TrainerOptions& options = {});

}  // namespace tandem
