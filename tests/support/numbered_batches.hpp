#pragma once
// Batches that carry their own number, for tests of the order they travel in.
#include <torch/torch.h>

#include <cstdint>

#include "data/dataset.hpp"

namespace tandem::testing {

// Batch n: a 1x1x2x2 input of n's and the target n.
inline data::Batch numberedBatch(int64_t n) {
  return {torch::full({1, 1, 2, 2}, static_cast<float>(n)), torch::full({1}, n)};
}
inline int64_t numberOf(const data::Batch& b) { return b.targets.item<int64_t>(); }

}  // namespace tandem::testing
