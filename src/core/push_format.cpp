#include "core/push_format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/error.hpp"

namespace tandem {
namespace {

size_t blocksOf(size_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }
size_t codeBytes(int bits, size_t n) { return bits == 8 ? n : (n + 1) / 2; }
float largestCode(int bits) { return bits == 8 ? 127.0f : 7.0f; }

// The code of value i, as a signed integer.
int codeAt(int bits, const unsigned char* codes, size_t i) {
  if (bits == 8) return static_cast<signed char>(codes[i]);
  const unsigned byte = codes[i / 2];
  return static_cast<int>(i % 2 == 0 ? byte & 0xfu : byte >> 4) - 8;
}

void putCode(int bits, unsigned char* codes, size_t i, int code) {
  if (bits == 8) {
    codes[i] = static_cast<unsigned char>(static_cast<signed char>(code));
    return;
  }
  const auto nibble = static_cast<unsigned>(code + 8);
  unsigned char& byte = codes[i / 2];
  byte = i % 2 == 0 ? static_cast<unsigned char>((byte & 0xf0u) | nibble)
                    : static_cast<unsigned char>((byte & 0x0fu) | (nibble << 4));
}

template <bool kAdd>
void decodeQuantised(int bits, const void* in, float* out, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(in);
  const unsigned char* codes = bytes + blocksOf(n) * sizeof(float);
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += kQuantBlock) {
    float scale;
    std::memcpy(&scale, bytes + b * sizeof(float), sizeof(scale));  // any alignment
    const size_t end = std::min(n, begin + kQuantBlock);
    for (size_t i = begin; i < end; ++i) {
      const float value = static_cast<float>(codeAt(bits, codes, i)) * scale;
      if constexpr (kAdd) {
        out[i] += value;
      } else {
        out[i] = value;
      }
    }
  }
}

void encodeQuantised(int bits, const float* in, float* residual, void* out, size_t n) {
  auto* bytes = static_cast<unsigned char*>(out);
  unsigned char* codes = bytes + blocksOf(n) * sizeof(float);
  const float top = largestCode(bits);
  float meant[kQuantBlock];
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += kQuantBlock) {
    const size_t count = std::min(n, begin + kQuantBlock) - begin;
    float largest = 0;
    for (size_t k = 0; k < count; ++k) {
      meant[k] = in[begin + k] + (residual ? residual[begin + k] : 0.0f);
      // NaN must win, so that a poisoned block shows.
      const float magnitude = std::fabs(meant[k]);
      largest = std::isnan(magnitude) || magnitude > largest ? magnitude : largest;
    }
    float scale = largest / top;
    const bool finite = std::isfinite(scale);
    if (!finite) scale = std::numeric_limits<float>::quiet_NaN();
    // Below float's smallest normal, 1 / scale would overflow: such a block
    // sends zeros (with feedback, the values wait in the residual).
    const bool zero = finite && scale < FLT_MIN;
    if (zero) scale = 0;
    std::memcpy(bytes + b * sizeof(float), &scale, sizeof(scale));
    const bool coded = finite && !zero;
    const float inverse = coded ? 1.0f / scale : 0.0f;
    for (size_t k = 0; k < count; ++k) {
      const int code = coded ? static_cast<int>(std::clamp(std::round(meant[k] * inverse), -top, top)) : 0;
      putCode(bits, codes, begin + k, code);
      // An infinite or NaN block shows in the loss; carrying it on would
      // poison every later push of these values (as encodeWireWithFeedback).
      if (residual) residual[begin + k] = finite ? meant[k] - static_cast<float>(code) * scale : 0.0f;
    }
  }
}

}  // namespace

size_t PushFormat::bytes(size_t n) const {
  if (bits == 0) return n * wireBytes(wire);
  return blocksOf(n) * sizeof(float) + codeBytes(bits, n);
}

std::string PushFormat::name() const { return bits == 0 ? wireDtypeName(wire) : fmt::format("int{}", bits); }

void PushFormat::decode(const void* in, float* out, size_t n) const {
  if (bits == 0) {
    decodeWire(wire, in, out, n);
  } else {
    decodeQuantised<false>(bits, in, out, n);
  }
}

void PushFormat::decodeAdd(const void* in, float* out, size_t n) const {
  if (bits == 0) {
    decodeAddWire(wire, in, out, n);
  } else {
    decodeQuantised<true>(bits, in, out, n);
  }
}

void PushFormat::encode(const float* in, float* residual, void* out, size_t n) const {
  if (bits != 0) {
    encodeQuantised(bits, in, residual, out, n);
  } else if (residual) {
    encodeWireWithFeedback(wire, in, residual, out, n);
  } else {
    encodeWire(wire, in, out, n);
  }
}

int checkPushBits(int bits, std::string_view flag) {
  if (bits != 0 && bits != 4 && bits != 8) {
    throw InputError(fmt::format("{} {}: expected 8 or 4 (0: pushes travel in the wire dtype)", flag, bits));
  }
  return bits;
}

}  // namespace tandem
