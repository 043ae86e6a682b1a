#include "api/ps_optimizer.hpp"

#include <fmt/format.h>

#include <optional>

#include "api/backward_passes.hpp"
#include "api/job.hpp"
#include "core/error.hpp"
#include "train/option_keywords.hpp"
#include "train/strategy_factory.hpp"

namespace tandem::api {
namespace {

// The settings of one parameter group, or nullopt for an optimizer the
// servers do not run.
std::optional<optim::OptimizerSettings> settingsOf(const torch::optim::OptimizerOptions& options) {
  optim::OptimizerSettings s;
  if (const auto* o = dynamic_cast<const torch::optim::SGDOptions*>(&options)) {
    if (o->dampening() != 0) throw InputError("tandem: the parameter servers run SGD without dampening");
    s.name = "sgd";
    s.momentum = o->momentum();
    s.nesterov = o->nesterov();
    s.weight_decay = o->weight_decay();
    return s;
  }
  auto adamLike = [&s](const auto& o, const char* name) {
    if (o.amsgrad()) throw InputError(fmt::format("tandem: the parameter servers run {} without amsgrad", name));
    s.name = name;
    s.beta1 = std::get<0>(o.betas());
    s.beta2 = std::get<1>(o.betas());
    s.eps = o.eps();
    s.weight_decay = o.weight_decay();
  };
  if (const auto* o = dynamic_cast<const torch::optim::AdamOptions*>(&options)) {
    adamLike(*o, "adam");
    return s;
  }
  if (const auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) {
    adamLike(*o, "adamw");
    return s;
  }
  if (const auto* o = dynamic_cast<const torch::optim::RMSpropOptions*>(&options)) {
    s.name = "rmsprop";
    s.alpha = o->alpha();
    s.eps = o->eps();
    s.weight_decay = o->weight_decay();
    s.momentum = o->momentum();
    s.centered = o->centered();
    return s;
  }
  return std::nullopt;
}

bool sameSettings(const optim::OptimizerSettings& a, const optim::OptimizerSettings& b) {
  return a.name == b.name && a.momentum == b.momentum && a.nesterov == b.nesterov &&
         a.weight_decay == b.weight_decay && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
         a.alpha == b.alpha && a.centered == b.centered;
}

}  // namespace

optim::OptimizerSettings serverOptimizerOf(torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  if (groups.empty()) throw InputError("tandem: the optimizer has no parameter groups");
  const auto first = settingsOf(groups[0].options());
  if (!first) {
    throw InputError("tandem: the parameter servers run torch::optim::SGD, Adam, AdamW or RMSprop; this optimizer "
                     "is none of them (use mode AllReduce for others)");
  }
  for (size_t g = 1; g < groups.size(); ++g) {
    const auto other = settingsOf(groups[g].options());
    if (!other || !sameSettings(*first, *other) || groups[g].options().get_lr() != groups[0].options().get_lr()) {
      throw InputError(fmt::format("tandem: parameter group {} has options other than group 0's; the parameter "
                                   "servers run one optimizer over every parameter",
                                   g));
    }
  }
  return *first;
}

double learningRateOf(torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups().at(0).options().get_lr();
}

// The trainer's own strategy for the job's servers, driven through the same
// interface: gradients every step, or (DiLoCo, local_steps) the caller's
// optimizer steps and the strategy exchanges changes every local_steps.
struct PsOptimizer::Impl {
  torch::nn::Module& module;
  std::vector<torch::Tensor> params;
  std::unique_ptr<train::Strategy> strategy{};
  train::RemoteParameters* remote = nullptr;
  train::StepPolicy policy{};
  std::unique_ptr<BackwardPasses> passes{};  // gradients to the servers: the update's passes
  bool finished = false;

  // The update's passes as the strategy counts them: they add up (Horovod).
  train::LocalStep localStep() const {
    train::LocalStep local;
    local.micro_steps = passes->perStep();
    local.sum_micro_steps = true;
    return local;
  }
};

PsOptimizer::PsOptimizer(torch::nn::Module& module, const PsOptimizerOptions& options)
    : impl_(new Impl{.module = module, .params = module.parameters()}) {
  Job& job = requireJob("DistributedOptimizer");
  if (!job.spec || job.spec->numServers() == 0) {
    throw InputError(fmt::format("tandem: mode {} needs parameter servers, and this job has none (launch with "
                                 "`tandem launch --ps K --workers N -- PROGRAM`)",
                                 modeName(options.mode)));
  }
  if (!usesServers(options.mode)) {
    throw InputError(fmt::format("tandem: {} is not a parameter-server mode", modeName(options.mode)));
  }
  if (options.mode == Mode::Ssp && options.staleness < 1) {
    throw InputError(fmt::format("tandem: ps-ssp needs a staleness of at least 1, got {}", options.staleness));
  }
  if (!(options.lr >= 0)) {
    throw InputError(fmt::format("tandem: learning rate {} must not be negative", options.lr));
  }
  train::TrainConfig config;
  static_cast<optim::OptimizerSettings&>(config.optimizer) = options.optimizer;
  config.optimizer.lr = options.lr;
  config.accumulate = options.backward_passes_per_step;
  auto& d = config.distributed;
  d.ps_mode = options.mode == Mode::PsAsync ? Mode::PsAsync : Mode::PsSync;
  d.staleness = options.mode == Mode::Ssp ? options.staleness : -1;
  d.wire_dtype = job.options.wire_dtype;
  d.error_feedback = job.options.error_feedback;
  d.peer_timeout_s = job.options.peer_timeout_s;
  d.rendezvous_timeout_s = job.options.rendezvous_timeout_s;
  train::applyKeywordValues(config, options.keywords, "tandem");
  Impl& s = *impl_;
  s.strategy = train::makeStrategy(job.spec, config, processContext(), /*joined=*/true);
  s.policy = s.strategy->policy();
  if (!s.policy.worker_applies_updates) {
    // Before the strategy's hooks: a pass too many is refused before any push.
    s.passes = std::make_unique<BackwardPasses>(s.params, options.backward_passes_per_step, [&s](int pass, bool) {
      s.strategy->beforeBackward(s.localStep(), pass);
    });
  }
  s.strategy->initialize(module, nlohmann::json::object(), {1, 0, 0, nullptr, nullptr, ""});
  s.remote = s.strategy->remoteParameters();
  TANDEM_ENFORCE(s.remote != nullptr, "a parameter-server strategy without remote parameters");
  if (s.passes) s.passes->startUpdate();
}

PsOptimizer::~PsOptimizer() {
  try {
    finish();
  } catch (const std::exception&) {
    // Leaving anyway; the servers give up on a silent worker by themselves.
  }
}

void PsOptimizer::setLearningRate(double lr) {
  if (!(lr >= 0)) throw InputError(fmt::format("tandem: learning rate {} is not a non-negative number", lr));
  if (impl_->finished) throw Error("tandem: DistributedOptimizer used after finish()");
  impl_->remote->setLearningRate(lr);
}

void PsOptimizer::step() {
  Impl& s = *impl_;
  if (s.finished) throw Error("tandem: DistributedOptimizer used after finish()");
  if (s.policy.worker_applies_updates) {  // the caller's optimizer stepped
    torch::NoGradGuard no_grad;
    train::AgreedStep agreed;
    s.strategy->afterUpdate(s.module, agreed);
    return;
  }
  s.passes->requireComplete("DistributedOptimizer::step");
  {
    torch::NoGradGuard no_grad;
    s.strategy->synchronizeGradients(s.module, s.localStep());
  }
  zeroGrad();
  s.passes->startUpdate();
}

void PsOptimizer::zeroGrad() {
  for (auto& p : impl_->params) p.mutable_grad().reset();
}

void PsOptimizer::finish() {
  Impl& s = *impl_;
  if (s.finished) return;
  s.finished = true;
  torch::NoGradGuard no_grad;
  s.remote->settleOpenRun(s.module);
  if (s.strategy->rank() == 0) s.remote->awaitJobEnd(0);
  s.strategy->finish();
}

}  // namespace tandem::api
