#pragma once
// A learnable dataset of any shape that costs no memory per sample: each
// class has a fixed coarse template drawn from the seed, and a sample is its
// class template plus noise, both generated on demand from (seed, split,
// index). Big shapes (3x224x224, thousands of samples) therefore measure the
// pipeline without needing gigabytes or a download.
#include <vector>

#include "data/dataset.hpp"

namespace tandem::data {

class SyntheticDataset final : public Dataset {
 public:
  // split_id separates train from test noise and labels; templates are shared.
  // Throws InputError for a non-positive or oversized shape, class count or size.
  SyntheticDataset(SampleShape shape, int64_t num_classes, int64_t size, uint64_t seed,
                   uint64_t split_id, bool augment);

  std::string name() const override { return "synthetic"; }
  int64_t size() const override { return size_; }
  SampleShape shape() const override { return shape_; }
  int64_t numClasses() const override { return num_classes_; }
  // Thread-safe: pure function of the constructor arguments and the call's.
  Batch getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const override;

  int64_t labelOf(int64_t index) const;

 private:
  void fillSample(int64_t index, float* dst) const;

  SampleShape shape_;
  int64_t num_classes_;
  int64_t size_;
  uint64_t seed_;
  uint64_t split_key_;
  bool augment_;
  int64_t grid_h_;
  int64_t grid_w_;
  std::vector<float> templates_;  // [classes, C, grid_h, grid_w]
  std::vector<int64_t> row_cell_;  // pixel row -> template row
  std::vector<int64_t> col_cell_;  // pixel column -> template column
};

}  // namespace tandem::data
