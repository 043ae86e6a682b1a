#pragma once
// How a parameter-server push's values travel (--push-bits): in the wire
// dtype (core/wire_dtype.hpp), or quantised to 8 or 4 bits a value with one
// float32 scale per block of kQuantBlock values. Pushes only: pulls stay in
// the wire dtype, since the model itself must not lose bits. Torch-free.
//
// A block's scale is its largest magnitude over 127 (8 bits) or 7 (4 bits);
// each value is rounded to the nearest multiple of it (ties away from
// zero). A payload holds the blocks' scales, then the codes: int8, or 4-bit
// codes two to a byte (the even value in the low nibble), each stored as
// code + 8. A block whose largest magnitude is not finite travels as NaN,
// which the caller's loss then shows.
#include <cstddef>
#include <string>

#include "core/wire_dtype.hpp"

namespace tandem {

inline constexpr size_t kQuantBlock = 128;

struct PushFormat {
  WireDtype wire = WireDtype::kFloat32;
  int bits = 0;  // 8 or 4: quantised, whatever the wire; 0: the wire dtype

  bool quantised() const { return bits != 0; }
  // float32 as computed: nothing to encode or decode.
  bool raw() const { return bits == 0 && wire == WireDtype::kFloat32; }
  // The payload of `n` values.
  size_t bytes(size_t n) const;
  // "int8", "int4", or the wire dtype's name.
  std::string name() const;

  void decode(const void* in, float* out, size_t n) const;
  void decodeAdd(const void* in, float* out, size_t n) const;  // out[i] += value i
  // bytes(n) at `out`; with a residual, error feedback as encodeWireWithFeedback.
  void encode(const float* in, float* residual, void* out, size_t n) const;
};

// Throws InputError naming `flag` unless `bits` is 0, 4 or 8.
int checkPushBits(int bits, std::string_view flag = "--push-bits");

}  // namespace tandem
