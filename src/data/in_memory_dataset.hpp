#pragma once
// A decoded image dataset held as uint8 [N, C, H, W] plus int64 labels.
// Keeping pixels as bytes makes Fashion-MNIST 47 MB instead of 188 MB, and
// the float conversion per batch is a couple of vectorised tensor ops.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/normalization.hpp"

namespace tandem::data {

class InMemoryDataset final : public Dataset {
 public:
  // images: uint8 [N, C, H, W] contiguous; labels: int64 [N], each in
  // [0, num_classes) (callers validate, so errors can name the file).
  InMemoryDataset(std::string name, torch::Tensor images, torch::Tensor labels,
                  int64_t num_classes, const Normalization& norm, bool augment);

  std::string name() const override { return name_; }
  int64_t size() const override { return images_.size(0); }
  SampleShape shape() const override { return shape_; }
  int64_t numClasses() const override { return num_classes_; }
  // Thread-safe: reads only immutable tensors.
  Batch getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const override;

 private:
  torch::Tensor gatherAugmented(std::span<const int64_t> indices, uint64_t augment_seed) const;

  std::string name_;
  torch::Tensor images_;
  torch::Tensor labels_;
  int64_t num_classes_;
  SampleShape shape_;
  bool augment_;
  torch::Tensor scale_;  // float [1, C, 1, 1]: 1 / (255 * std)
  torch::Tensor shift_;  // float [1, C, 1, 1]: -mean / std
};

}  // namespace tandem::data
