#pragma once
// Rounds numbered slots of floats (all-reduce buckets, PS chunks) into a
// 16-bit wire format, each slot into a buffer of its own that lives until
// the slot is encoded again, so the bytes can be sent without a copy. With
// error feedback each slot carries what rounding lost into its next encode.
// The one encoder behind collective::BucketReducer and ps::Worker. Torch-free.
//
// Thread-safety: different slots may be encoded from different threads once
// the encoder holds them all (constructed with `slots`); a slot beyond that
// grows the encoder and must not race with anything.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/wire_dtype.hpp"

namespace tandem {

class WireEncoder {
 public:
  // `wire` must be 16-bit: float32 travels as it is, with nothing to encode.
  WireEncoder(WireDtype wire, bool error_feedback, size_t slots = 0);

  // Slot `slot`'s `n` floats at `in`, rounded (plus the slot's residual)
  // into the slot's buffer; returns that buffer, which the caller may also
  // sum into in place (all-reduce). A slot keeps its size: the
  // same slot must come with the same `n` (all-reduce caches on the address).
  uint16_t* encode(size_t slot, const float* in, size_t n);

  WireDtype wire() const { return wire_; }
  bool errorFeedback() const { return error_feedback_; }

 private:
  WireDtype wire_;
  bool error_feedback_;
  std::vector<std::vector<uint16_t>> buffers_;  // by slot
  std::vector<std::vector<float>> residuals_;   // by slot, with error feedback
};

}  // namespace tandem
