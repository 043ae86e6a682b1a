#pragma once
// How big an all-reduce bucket is when the user does not say (--bucket-mb 0).
// Header-only and torch-free: the trainer, the C++ API and `tandem plan`
// size buckets by it.
#include <algorithm>
#include <cstdint>

namespace tandem::collective {

// About 16 buckets of the model, each from 256 KiB to 4 MiB. Fine enough
// that the exchange starts early in backward and the last bucket's after it
// is short; coarse enough that each message's fixed cost stays small.
// (Gloo's all-reduce stalled on smaller buckets here:
// collective/communicator.hpp.)
constexpr int64_t autoBucketFloats(int64_t total_floats) {
  constexpr int64_t kSmallest = (256 << 10) / 4, kLargest = (4 << 20) / 4;
  return std::clamp((total_floats + 15) / 16, kSmallest, kLargest);
}

}  // namespace tandem::collective
