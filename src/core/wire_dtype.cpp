#include "core/wire_dtype.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace tandem {

std::string wireDtypeName(WireDtype dtype) {
  switch (dtype) {
    case WireDtype::kFloat32:
      return "fp32";
    case WireDtype::kFloat16:
      return "fp16";
    case WireDtype::kBfloat16:
      return "bf16";
  }
  return "fp32";
}

WireDtype parseWireDtype(std::string_view text, std::string_view flag) {
  if (text == "fp32" || text == "float32") return WireDtype::kFloat32;
  if (text == "fp16" || text == "float16") return WireDtype::kFloat16;
  if (text == "bf16" || text == "bfloat16") return WireDtype::kBfloat16;
  throw InputError(fmt::format("{} {}: expected fp32, fp16 or bf16", flag, text));
}

uint16_t floatToHalf(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  bits &= 0x7fffffffu;
  if (bits >= 0x47800000u) {  // 65536 and up, infinity or NaN: nothing finite rounds from there
    return static_cast<uint16_t>(sign | (bits > 0x7f800000u ? 0x7e00u : 0x7c00u));
  }
  if (bits < 0x38800000u) {
    // Below fp16's smallest normal (2^-14): adding 0.5 puts the value's
    // subnormal fp16 mantissa in the float's low bits, and the float adder
    // rounds it to nearest even for us.
    const float shifted = std::bit_cast<float>(bits) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  // Rebias the exponent (127 -> 15), then round the 13 dropped mantissa bits
  // to nearest even; a carry may run into the exponent, up to infinity.
  const uint32_t odd = (bits >> 13) & 1u;
  bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (bits >> 13));
}

float halfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa x 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t floatToBfloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // stay NaN
  const uint32_t odd = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + odd) >> 16);
}

float bfloat16ToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

namespace {

template <class Fn>
void forEach16(WireDtype dtype, Fn fn) {
  if (dtype == WireDtype::kFloat16) {
    fn(&floatToHalf, &halfToFloat);
  } else {
    fn(&floatToBfloat16, &bfloat16ToFloat);
  }
}

}  // namespace

void encodeWire(WireDtype dtype, const float* in, void* out, size_t n) {
  if (dtype == WireDtype::kFloat32) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  auto* o = static_cast<uint16_t*>(out);
  forEach16(dtype, [&](auto to, auto) {
    for (size_t i = 0; i < n; ++i) o[i] = to(in[i]);
  });
}

void decodeWire(WireDtype dtype, const void* in, float* out, size_t n) {
  if (dtype == WireDtype::kFloat32) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  const auto* i16 = static_cast<const uint16_t*>(in);
  forEach16(dtype, [&](auto, auto from) {
    for (size_t i = 0; i < n; ++i) out[i] = from(i16[i]);
  });
}

void decodeAddWire(WireDtype dtype, const void* in, float* out, size_t n) {
  if (dtype == WireDtype::kFloat32) {
    const auto* f = static_cast<const float*>(in);
    for (size_t i = 0; i < n; ++i) out[i] += f[i];
    return;
  }
  const auto* i16 = static_cast<const uint16_t*>(in);
  forEach16(dtype, [&](auto, auto from) {
    for (size_t i = 0; i < n; ++i) out[i] += from(i16[i]);
  });
}

void encodeWireWithFeedback(WireDtype dtype, const float* in, float* residual, void* out, size_t n) {
  if (dtype == WireDtype::kFloat32) {
    encodeWire(dtype, in, out, n);
    return;
  }
  auto* o = static_cast<uint16_t*>(out);
  forEach16(dtype, [&](auto to, auto from) {
    for (size_t i = 0; i < n; ++i) {
      const float meant = in[i] + residual[i];
      o[i] = to(meant);
      const float sent = from(o[i]);
      // An overflow to infinity shows in the loss; carrying -inf on would
      // poison every later step of this value.
      residual[i] = std::isfinite(sent) ? meant - sent : 0.0f;
    }
  });
}

void sumWire16(WireDtype dtype, void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  forEach16(dtype, [&](auto to, auto from) {
    for (size_t i = 0; i < n; ++i) out[i] = to(from(x[i]) + from(y[i]));
  });
}

}  // namespace tandem
