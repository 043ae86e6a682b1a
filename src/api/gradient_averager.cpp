// GradientAverager and DistributedOptimizer: the trainer's gradient buckets
// (hooks that all-reduce while backward runs) behind the public API.
#include <fmt/format.h>

#include <optional>

#include "api/backward_passes.hpp"
#include "api/job.hpp"
#include "api/ps_optimizer.hpp"
#include "collective/bucket_reducer.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/wire_dtype.hpp"
#include "tandem/tandem.hpp"
#include "train/gradient_buckets.hpp"

namespace tandem {
namespace {

// Buckets pair floats by position: every rank's parameters must agree.
uint64_t parameterLayout(torch::nn::Module& module) {
  Fnv1a hash;
  for (const auto& p : module.named_parameters()) {
    hash.add(p.key().data(), p.key().size());
    for (int64_t d : p.value().sizes()) hash.addValue(d);
  }
  return hash.value();
}

}  // namespace

struct GradientAverager::Impl {
  std::vector<torch::Tensor> parameters;
  std::unique_ptr<api::BackwardPasses> passes;
  std::unique_ptr<train::GradientBuckets> buckets;  // null with one rank
  std::vector<collective::CommHandle> handles;
  // Shared with the queued sums, which may outlive this averager.
  std::shared_ptr<collective::BucketReducer> reducer;
  double scale = 1.0;
};

GradientAverager::GradientAverager(torch::nn::Module& module, int backward_passes_per_step)
    : impl_(std::make_unique<Impl>()) {
  api::Job& job = api::requireJob("GradientAverager");
  Impl& s = *impl_;
  s.parameters = module.parameters();
  // Before the buckets' hooks: a pass too many is refused before any send.
  s.passes = std::make_unique<api::BackwardPasses>(s.parameters, backward_passes_per_step, [&s](int pass, bool last) {
    if (s.buckets) s.buckets->beginMicroStep(pass, last, s.scale);
  });
  if (job.size() > 1) {
    api::requireAgreement(job, parameterLayout(module), "parameter names or shapes");
    const WireDtype wire = parseWireDtype(job.options.wire_dtype, "tandem::init: wire_dtype");
    const std::string wire_text = wireDtypeName(wire) + (job.options.error_feedback ? "+feedback" : "");
    Fnv1a wire_hash;
    wire_hash.add(wire_text.data(), wire_text.size());
    api::requireAgreement(job, wire_hash.value(), "wire_dtype and error_feedback");
    s.reducer = std::make_shared<collective::BucketReducer>(*job.comm, wire, job.options.error_feedback);
    s.buckets = std::make_unique<train::GradientBuckets>(
        module, train::bucketCapBytes(module, job.options.bucket_mb), 0,
        [&s, &job](size_t bucket, torch::Tensor flat) {
          s.handles[bucket] = job.comm_thread->submit([reducer = s.reducer, flat, bucket] {
            reducer->reduce(bucket, flat.data_ptr<float>(), static_cast<size_t>(flat.numel()));
          });
        },
        [] {});
    s.handles.resize(s.buckets->size());
    s.scale = 1.0 / job.size();  // passes add up; workers average
  }
  s.passes->startUpdate();
}

GradientAverager::~GradientAverager() = default;

void GradientAverager::synchronize() {
  Impl& s = *impl_;
  s.passes->requireComplete("GradientAverager::synchronize");
  if (!s.buckets) return;
  api::Job& job = api::requireJob("GradientAverager::synchronize");
  s.buckets->flush();
  for (size_t b = 0; b < s.handles.size(); ++b) {
    s.handles[b].wait(job.deadline(), fmt::format("all-reduce of gradient bucket {}", b));
  }
  s.buckets->exposeGradients();
}

void GradientAverager::zero_grad() {
  Impl& s = *impl_;
  for (auto& p : s.parameters) p.mutable_grad().reset();
  s.passes->startUpdate();
}

struct DistributedOptimizer::Impl {
  torch::optim::Optimizer& optimizer;
  std::optional<GradientAverager> averager;       // AllReduce
  std::unique_ptr<api::PsOptimizer> servers;      // PS modes
};

namespace {

const char* psModeName(Mode mode) {
  switch (mode) {
    case Mode::PsSync: return "ps-sync";
    case Mode::PsAsync: return "ps-async";
    case Mode::Ssp: return "ssp";
    default: return "allreduce";
  }
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer, torch::nn::Module& module,
                                           const DistributedOptions& options)
    : impl_(new Impl{optimizer, std::nullopt, nullptr}) {
  if (options.mode == Mode::AllReduce) {
    impl_->averager.emplace(module, options.backward_passes_per_step);
    return;
  }
  api::PsOptimizerOptions ps;
  ps.mode = psModeName(options.mode);
  ps.staleness = options.staleness;
  ps.backward_passes_per_step = options.backward_passes_per_step;
  ps.chunk_mb = options.ps_chunk_mb;
  ps.optimizer = api::serverOptimizerOf(optimizer);
  ps.lr = api::learningRateOf(optimizer);
  impl_->servers = std::make_unique<api::PsOptimizer>(module, ps);
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zero_grad() {
  if (impl_->averager) return impl_->averager->zero_grad();
  // The rate a scheduler set since the last step applies from this update on.
  impl_->servers->setLearningRate(api::learningRateOf(impl_->optimizer));
  impl_->servers->zeroGrad();
}

void DistributedOptimizer::step() {
  if (impl_->averager) {
    impl_->averager->synchronize();
    impl_->optimizer.step();
    impl_->averager->zero_grad();
    return;
  }
  impl_->servers->step();
  impl_->servers->setLearningRate(api::learningRateOf(impl_->optimizer));
}

void DistributedOptimizer::finish() {
  if (impl_->servers) impl_->servers->finish();
}

}  // namespace tandem
