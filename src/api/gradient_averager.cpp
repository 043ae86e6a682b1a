// GradientAverager and DistributedOptimizer: the trainer's gradient buckets
// (hooks that all-reduce while backward runs) behind the public API.
#include <fmt/format.h>

#include "api/job.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
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
  std::unique_ptr<train::GradientBuckets> buckets;  // null with one rank
  std::vector<collective::CommHandle> handles;
  double scale = 1.0;
};

GradientAverager::GradientAverager(torch::nn::Module& module) : impl_(std::make_unique<Impl>()) {
  api::Job& job = api::requireJob("GradientAverager");
  Impl& s = *impl_;
  s.parameters = module.parameters();
  if (job.size() == 1) return;
  api::requireAgreement(job, parameterLayout(module), "parameter names or shapes");
  const auto cap = static_cast<size_t>(job.options.bucket_mb * 1024 * 1024);
  s.buckets = std::make_unique<train::GradientBuckets>(
      module, cap, 0,
      [&s, &job](size_t bucket, torch::Tensor flat) {
        s.handles[bucket] = job.comm_thread->submit(
            [&job, flat] { job.comm->allreduceSum(flat.data_ptr<float>(), static_cast<size_t>(flat.numel())); });
      },
      [] {});
  s.handles.resize(s.buckets->size());
  s.scale = 1.0 / job.size();
  s.buckets->beginMicroStep(0, true, s.scale);
}

GradientAverager::~GradientAverager() = default;

void GradientAverager::synchronize() {
  Impl& s = *impl_;
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
  if (s.buckets) s.buckets->beginMicroStep(0, true, s.scale);
}

struct DistributedOptimizer::Impl {
  torch::optim::Optimizer& optimizer;
  GradientAverager averager;
};

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer, torch::nn::Module& module)
    : impl_(new Impl{optimizer, GradientAverager(module)}) {}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zero_grad() { impl_->averager.zero_grad(); }

void DistributedOptimizer::step() {
  impl_->averager.synchronize();
  impl_->optimizer.step();
  impl_->averager.zero_grad();
}

}  // namespace tandem
