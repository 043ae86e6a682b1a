// tandem::fit (include/tandem/trainer.hpp): the trainer of `tandem train`
// with the caller's module, tensors and loss in place of named ones.
#include "tandem/trainer.hpp"

#include <fmt/format.h>

#include <thread>

#include "api/job.hpp"
#include "cluster/cluster_spec.hpp"
#include "cluster/process_setup.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "data/tensor_dataset.hpp"
#include "train/strategy_factory.hpp"
#include "train/trainer.hpp"

namespace tandem {
namespace {

// The caller's module as the trainer's Model: its parameters and buffers
// under "user.", its forward as given.
class UserModel final : public models::Model {
 public:
  UserModel(std::shared_ptr<torch::nn::Module> module, std::function<torch::Tensor(const torch::Tensor&)> forward)
      : forward_(std::move(forward)) {
    register_module("user", std::move(module));
  }
  torch::Tensor forward(torch::Tensor x) override { return forward_(x); }

 private:
  std::function<torch::Tensor(const torch::Tensor&)> forward_;
};

train::TrainConfig configFrom(const TrainerOptions& o) {
  train::TrainConfig c;
  c.model = o.name;
  c.loss = "user";
  c.dataset.name = "tensors";
  c.batch_size = o.batch_size;
  c.max_steps = o.max_steps;
  c.epochs = o.epochs;
  c.optimizer.name = o.optimizer;
  c.optimizer.lr = o.lr;
  train::applyOptimizerDefaults(c.optimizer, o.momentum, o.weight_decay);
  c.seed = o.seed;
  c.out_dir = o.out_dir;
  c.overwrite = o.overwrite;
  c.eval_every_steps = o.eval_every_steps;
  c.log_every_steps = o.log_every_steps;
  c.checkpoint_every_steps = o.checkpoint_every_steps;
  c.distributed.ps_mode = o.ps_mode;
  c.distributed.staleness = o.staleness;
  c.distributed.peer_timeout_s = o.peer_timeout_s;
  c.distributed.rendezvous_timeout_s = o.rendezvous_timeout_s;
  return c;
}

}  // namespace

std::string fit(std::shared_ptr<torch::nn::Module> module,
                  std::function<torch::Tensor(const torch::Tensor&)> forward, const TensorData& train_data,
                  const TensorData& test_data, LossFn loss, const TrainerOptions& options) {
  if (api::current()) {
    throw Error("tandem::fit joins the job itself; call it without tandem::init() (or after tandem::shutdown())");
  }
  if (!module || !forward || !loss) throw InputError("tandem::fit: module, forward and loss must all be given");
  train::TrainConfig config = configFrom(options);
  cluster::JobContext& context = api::processContext();
  const cluster::ProcessSetup process = cluster::setUpProcess({}, 0, context.environment());
  cluster::requireWorkerTask(process, "tandem::fit");
  const std::optional<cluster::ClusterSpec>& spec = process.spec;
  config.threads = process.threads.threads;
  config.local_processes = process.threads.local_processes;
  config.local_rank = process.local.rank;  // under a launcher, the GPU of this rank

  train::TrainerParts parts;
  parts.model = std::make_shared<UserModel>(std::move(module), std::move(forward));
  parts.data = data::DatasetSplits{
      std::make_shared<data::TensorDataset>("training data", train_data.inputs, train_data.targets),
      std::make_shared<data::TensorDataset>("test data", test_data.inputs, test_data.targets)};
  parts.loss = std::move(loss);  // the same signature as the trainer's LossFunction
  // The default secret (TANDEM_SECRET_FILE, else the user's), as init()'s.
  if (spec) context.setSecurity(net::resolveJobSecurity("", false, context.environment()));
  train::Trainer trainer(config, train::makeStrategy(spec, config, context), context, nullptr, std::move(parts));
  return trainer.run().dump(2);
}

}  // namespace tandem
