#pragma once
// Encodes numbered slots of floats (all-reduce buckets, PS chunks) into a
// wire format (16-bit, or a push's 8 or 4 bits, core/push_format.hpp), each
// slot into a buffer of its own that lives until the slot is encoded again,
// so the bytes can be sent without a copy. With error feedback each slot
// carries what encoding lost into its next encode. The one encoder behind
// collective::BucketReducer and ps::Worker. Torch-free.
//
// Thread-safety: different slots may be encoded from different threads once
// the encoder holds them all (constructed with `slots`); a slot beyond that
// grows the encoder and must not race with anything.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/push_format.hpp"
#include "core/wire_dtype.hpp"

namespace tandem {

class WireEncoder {
 public:
  // The format must encode something: float32 travels as it is.
  WireEncoder(PushFormat format, bool error_feedback, size_t slots = 0);
  WireEncoder(WireDtype wire, bool error_feedback, size_t slots = 0)
      : WireEncoder(PushFormat{wire, 0}, error_feedback, slots) {}

  // Slot `slot`'s `n` floats at `in`, encoded (plus the slot's residual)
  // into the slot's buffer of format().bytes(n); returns that buffer, which
  // a 16-bit all-reduce also sums into in place. A slot keeps its size: the
  // same slot must come with the same `n` (all-reduce caches on the address).
  void* encode(size_t slot, const float* in, size_t n);

  const PushFormat& format() const { return format_; }
  bool errorFeedback() const { return error_feedback_; }

 private:
  PushFormat format_;
  bool error_feedback_;
  // By slot. uint16_t: a 16-bit buffer's values stay aligned.
  std::vector<std::vector<uint16_t>> buffers_;
  std::vector<size_t> values_;                 // by slot: how many it holds
  std::vector<std::vector<float>> residuals_;  // by slot, with error feedback
};

}  // namespace tandem
