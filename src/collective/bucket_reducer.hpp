#pragma once
// Sums gradient buckets across ranks in the job's wire format (--wire-dtype):
// float32 as they are, or rounded to 16 bits (optionally carrying each
// value's rounding into its next sum, --error-feedback), summed in 16 bits
// and decoded back in place. One piece of code for the trainer's all-reduce
// and the C++/Python API's. Torch-free; call from one thread (a CommThread).
#include <cstddef>
#include <cstdint>
#include <optional>

#include "collective/communicator.hpp"
#include "core/wire_dtype.hpp"
#include "core/wire_encoder.hpp"

namespace tandem::collective {

class BucketReducer {
 public:
  BucketReducer(Communicator& comm, WireDtype wire, bool error_feedback);

  // Sums bucket `bucket`'s `count` floats at `data` across every rank, in
  // place. The last `exact_tail` floats travel as float32 whatever the
  // format (step times, loss and stop flags, whose values must stay exact).
  // Buffers are kept per bucket, so the same bucket must come with the same
  // count. Returns the bytes of the bucket in the wire format.
  size_t reduce(size_t bucket, float* data, size_t count, size_t exact_tail = 0);

  WireDtype wire() const { return wire_; }

 private:
  Communicator& comm_;
  WireDtype wire_;
  std::optional<WireEncoder> encoder_;  // 16-bit wires: a buffer (and residuals) by bucket
};

}  // namespace tandem::collective
