// The checkpoint readers of run_artifacts.hpp: the one place tests that
// only run `tandem` processes touch torch.
#include "support/run_artifacts.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "models/registry.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/optimizer_state.hpp"

namespace tandem::testing {
namespace {

StoredTensor stored(const std::string& name, const torch::Tensor& t) {
  const torch::Tensor flat = t.detach().to(torch::kFloat32).contiguous().view(-1);
  return {name, t.sizes().vec(), std::vector<float>(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel())};
}

models::InputSpec spec(const ModelInput& input) {
  return {input.channels, input.height, input.width, input.classes};
}

}  // namespace

StoredParameters checkpointParameters(const std::string& path, const ModelInput& input) {
  train::LoadedCheckpoint checkpoint(path);
  const auto config = train::trainConfigFromJson(checkpoint.meta().config);
  auto model = models::createModel(config.model, spec(input), config.model_options);
  checkpoint.restore(*model, nullptr, false);
  StoredParameters out;
  for (const auto& item : model->named_parameters()) out.push_back(stored(item.key(), item.value()));
  return out;
}

StoredParameters checkpointTensors(const std::string& path, const std::string& model_name, const ModelInput& input) {
  train::LoadedCheckpoint checkpoint(path);
  auto model = models::createModel(model_name, spec(input));
  checkpoint.restore(*model, nullptr, false);
  StoredParameters out;
  for (const auto& group : {model->named_parameters(), model->named_buffers()}) {
    for (const auto& item : group) out.push_back(stored(item.key(), item.value()));
  }
  return out;
}

int64_t checkpointGlobalStep(const std::string& path) { return train::LoadedCheckpoint(path).meta().global_step; }

std::vector<int64_t> checkpointAdamSteps(const std::string& path, const ModelInput& input) {
  train::LoadedCheckpoint checkpoint(path);
  const auto config = train::trainConfigFromJson(checkpoint.meta().config);
  auto model = models::createModel(config.model, spec(input), config.model_options);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  checkpoint.restore(*model, &adam, false);
  std::vector<int64_t> steps;
  for (const auto& p : model->parameters()) {
    const auto it = adam.state().find(train::optimizerStateKey(p));
    steps.push_back(it == adam.state().end() ? -1 : static_cast<torch::optim::AdamParamState&>(*it->second).step());
  }
  return steps;
}

namespace {

// Calls `each(x, y, n)` for same-numbered tensors' values (n of each);
// their counts and sizes must agree.
template <typename Each>
void forEachTensorPair(const StoredParameters& a, const StoredParameters& b, Each each) {
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].values.size(), b[i].values.size()) << "tensor " << i;
    each(a[i].values.data(), b[i].values.data(), std::min(a[i].values.size(), b[i].values.size()));
  }
}

}  // namespace

double maxRelativeDifference(const StoredParameters& a, const StoredParameters& b) {
  double worst = 0;
  forEachTensorPair(a, b, [&](const float* x, const float* y, size_t n) {
    double norm = 0, diff = 0;
    for (size_t k = 0; k < n; ++k) {
      norm += static_cast<double>(y[k]) * y[k];
      diff += (static_cast<double>(x[k]) - y[k]) * (static_cast<double>(x[k]) - y[k]);
    }
    worst = std::max(worst, norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff));
  });
  return worst;
}

double maxAbsoluteDifference(const StoredParameters& a, const StoredParameters& b) {
  double worst = 0;
  forEachTensorPair(a, b, [&](const float* x, const float* y, size_t n) {
    for (size_t k = 0; k < n; ++k) worst = std::max(worst, std::abs(static_cast<double>(x[k]) - y[k]));
  });
  return worst;
}

}  // namespace tandem::testing
