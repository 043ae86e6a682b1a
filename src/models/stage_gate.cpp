// Model::enterStage: the prefix of trainable parameters a stage needs.
#include <algorithm>
#include <unordered_map>

#include "models/registry.hpp"

namespace tandem::models {

void Model::enterStage(const torch::nn::Module& stage) {
  if (!gate_) return;
  auto it = stage_counts_.find(&stage);
  if (it == stage_counts_.end()) {
    std::unordered_map<const void*, size_t> index_of;
    size_t index = 0;
    for (const auto& p : parameters()) {
      if (p.requires_grad()) index_of[p.unsafeGetTensorImpl()] = index++;
    }
    size_t count = 0;
    for (const auto& p : stage.parameters()) {
      if (auto found = index_of.find(p.unsafeGetTensorImpl()); found != index_of.end()) {
        count = std::max(count, found->second + 1);
      }
    }
    it = stage_counts_.emplace(&stage, count).first;
  }
  if (it->second > 0) gate_(it->second);
}

torch::Tensor Model::forwardStages(torch::nn::Sequential& stages, torch::Tensor x) {
  for (auto& stage : *stages) {
    enterStage(*stage.ptr());
    x = stage.forward(x);
  }
  return x;
}

}  // namespace tandem::models
