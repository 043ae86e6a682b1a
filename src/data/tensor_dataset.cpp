#include "data/tensor_dataset.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace tandem::data {

TensorDataset::TensorDataset(std::string name, torch::Tensor inputs, torch::Tensor targets)
    : name_(std::move(name)) {
  if (!inputs.defined() || inputs.dim() < 2 || inputs.size(0) == 0) {
    throw InputError(fmt::format("{}: inputs must be a non-empty [N, ...] tensor", name_));
  }
  if (inputs.scalar_type() != torch::kFloat32) {
    throw InputError(fmt::format("{}: inputs must be float32, got {}", name_, c10::toString(inputs.scalar_type())));
  }
  if (!targets.defined() || targets.dim() != 1 || targets.scalar_type() != torch::kInt64) {
    throw InputError(fmt::format("{}: targets must be an int64 [N] tensor of class indices", name_));
  }
  if (targets.size(0) != inputs.size(0)) {
    throw InputError(fmt::format("{}: {} inputs but {} targets", name_, inputs.size(0), targets.size(0)));
  }
  const int64_t low = targets.min().item<int64_t>();
  if (low < 0) throw InputError(fmt::format("{}: target {} is negative", name_, low));
  classes_ = targets.max().item<int64_t>() + 1;
  // Held on the CPU, contiguous: batches are gathered by the prefetch threads.
  inputs_ = inputs.detach().to(torch::kCPU).contiguous();
  targets_ = targets.detach().to(torch::kCPU).contiguous();
}

SampleShape TensorDataset::shape() const {
  SampleShape s;
  if (inputs_.dim() == 4) {
    s.channels = inputs_.size(1);
    s.height = inputs_.size(2);
    s.width = inputs_.size(3);
  } else {
    s.channels = inputs_[0].numel();
    s.height = 1;
    s.width = 1;
  }
  return s;
}

Batch TensorDataset::getBatch(std::span<const int64_t> indices, uint64_t) const {
  auto index = torch::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())},
                                torch::kInt64);
  return {inputs_.index_select(0, index), targets_.index_select(0, index)};
}

}  // namespace tandem::data
