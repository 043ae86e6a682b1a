#pragma once
// Samples already in memory as two tensors (the C++ API's tandem::fit).
#include <torch/torch.h>

#include <string>

#include "data/dataset.hpp"

namespace tandem::data {

class TensorDataset final : public Dataset {
 public:
  // inputs: float32 [N, ...]; targets: int64 class indices [N], in
  // [0, classes). Throws InputError naming `name` and what is wrong.
  TensorDataset(std::string name, torch::Tensor inputs, torch::Tensor targets);

  std::string name() const override { return name_; }
  int64_t size() const override { return inputs_.size(0); }
  // [C, H, W] for 4-d inputs; otherwise the per-sample floats as [C, 1, 1].
  SampleShape shape() const override;
  int64_t numClasses() const override { return classes_; }
  // The rows at `indices`, in the inputs' own shape; no augmentation.
  Batch getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const override;

 private:
  std::string name_;
  torch::Tensor inputs_;
  torch::Tensor targets_;
  int64_t classes_ = 0;
};

}  // namespace tandem::data
