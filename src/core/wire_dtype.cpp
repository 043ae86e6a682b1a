#include "core/wire_dtype.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/error.hpp"

namespace tandem {

std::string wireDtypeName(WireDtype dtype) { return std::string(enumName(kWireDtypeNames, dtype)); }

WireDtype parseWireDtype(std::string_view text, std::string_view flag) {
  if (text == "fp32" || text == "float32") return WireDtype::kFloat32;
  if (text == "fp16" || text == "float16") return WireDtype::kFloat16;
  if (text == "bf16" || text == "bfloat16") return WireDtype::kBfloat16;
  throw InputError(fmt::format("{} {}: expected {}", flag, text, enumChoicesText(kWireDtypeNames)));
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

#if defined(__x86_64__)
// Eight values at a time with AVX2 (and F16C for fp16), on CPUs that have
// them: a scalar conversion costs ~5 ns a value, which on a 60M-parameter
// model is a third of a second per step. Same rounding as the scalar code
// (the scalar tests compare both); NaNs stay NaN, payloads aside.
#define TANDEM_SIMD __attribute__((target("avx2,f16c")))

TANDEM_SIMD inline __m256 load8(WireDtype d, const uint16_t* in) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
  if (d == WireDtype::kFloat16) return _mm256_cvtph_ps(raw);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

TANDEM_SIMD inline void store8(WireDtype d, __m256 v, uint16_t* out) {
  __m128i packed;
  if (d == WireDtype::kFloat16) {
    packed = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  } else {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    rounded = _mm256_blendv_epi8(rounded, quiet, nan);
    // Pack 8 x 32 bits to 16 (values fit): packus works per 128-bit lane.
    const __m256i both = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08);
    packed = _mm256_castsi256_si128(both);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
}

bool haveSimd() {
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
  // does not know "f16c".
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return have;
}

TANDEM_SIMD size_t encodeSimd(WireDtype d, const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) store8(d, _mm256_loadu_ps(in + i), out + i);
  return i;
}

TANDEM_SIMD size_t decodeSimd(WireDtype d, const uint16_t* in, float* out, size_t n, bool add) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = load8(d, in + i);
    if (add) v = _mm256_add_ps(v, _mm256_loadu_ps(out + i));
    _mm256_storeu_ps(out + i, v);
  }
  return i;
}

TANDEM_SIMD size_t feedbackSimd(WireDtype d, const float* in, float* residual, uint16_t* out, size_t n) {
  const __m256 infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 sign = _mm256_set1_ps(-0.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 meant = _mm256_add_ps(_mm256_loadu_ps(in + i), _mm256_loadu_ps(residual + i));
    store8(d, meant, out + i);
    const __m256 sent = load8(d, out + i);
    const __m256 finite = _mm256_cmp_ps(_mm256_andnot_ps(sign, sent), infinity, _CMP_LT_OQ);
    _mm256_storeu_ps(residual + i, _mm256_and_ps(finite, _mm256_sub_ps(meant, sent)));
  }
  return i;
}

TANDEM_SIMD size_t sumSimd(WireDtype d, uint16_t* c, const uint16_t* a, const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) store8(d, _mm256_add_ps(load8(d, a + i), load8(d, b + i)), c + i);
  return i;
}
#else
bool haveSimd() { return false; }
size_t encodeSimd(WireDtype, const float*, uint16_t*, size_t) { return 0; }
size_t decodeSimd(WireDtype, const uint16_t*, float*, size_t, bool) { return 0; }
size_t feedbackSimd(WireDtype, const float*, float*, uint16_t*, size_t) { return 0; }
size_t sumSimd(WireDtype, uint16_t*, const uint16_t*, const uint16_t*, size_t) { return 0; }
#endif

}  // namespace

bool wireSimdEnabled = true;

void encodeWire(WireDtype dtype, const float* in, void* out, size_t n) {
  if (dtype == WireDtype::kFloat32) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  auto* o = static_cast<uint16_t*>(out);
  const size_t done = wireSimdEnabled && haveSimd() ? encodeSimd(dtype, in, o, n) : 0;
  forEach16(dtype, [&](auto to, auto) {
    for (size_t i = done; i < n; ++i) o[i] = to(in[i]);
  });
}

// Value i of a received payload, which may sit at any byte offset in its
// message (a uint16_t load from there is undefined; UBSan caught one).
inline uint16_t load16(const void* in, size_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const unsigned char*>(in) + 2 * i, sizeof(v));
  return v;
}

void decodeWire(WireDtype dtype, const void* in, float* out, size_t n) {
  if (dtype == WireDtype::kFloat32) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  const auto* i16 = static_cast<const uint16_t*>(in);
  const size_t done = wireSimdEnabled && haveSimd() ? decodeSimd(dtype, i16, out, n, false) : 0;
  forEach16(dtype, [&](auto, auto from) {
    for (size_t i = done; i < n; ++i) out[i] = from(load16(in, i));
  });
}

void decodeAddWire(WireDtype dtype, const void* in, float* out, size_t n) {
  if (dtype == WireDtype::kFloat32) {
    const auto* bytes = static_cast<const unsigned char*>(in);
    for (size_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, bytes + i * sizeof(float), sizeof(v));  // any alignment, as load16
      out[i] += v;
    }
    return;
  }
  const auto* i16 = static_cast<const uint16_t*>(in);
  const size_t done = wireSimdEnabled && haveSimd() ? decodeSimd(dtype, i16, out, n, true) : 0;
  forEach16(dtype, [&](auto, auto from) {
    for (size_t i = done; i < n; ++i) out[i] += from(load16(in, i));
  });
}

void encodeWireWithFeedback(WireDtype dtype, const float* in, float* residual, void* out, size_t n) {
  if (dtype == WireDtype::kFloat32) {
    encodeWire(dtype, in, out, n);
    return;
  }
  auto* o = static_cast<uint16_t*>(out);
  const size_t done = wireSimdEnabled && haveSimd() ? feedbackSimd(dtype, in, residual, o, n) : 0;
  forEach16(dtype, [&](auto to, auto from) {
    for (size_t i = done; i < n; ++i) {
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
  const size_t done = wireSimdEnabled && haveSimd() ? sumSimd(dtype, out, x, y, n) : 0;
  forEach16(dtype, [&](auto to, auto from) {
    for (size_t i = done; i < n; ++i) out[i] = to(from(x[i]) + from(y[i]));
  });
}

}  // namespace tandem
