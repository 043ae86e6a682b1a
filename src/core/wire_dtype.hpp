#pragma once
// The number format gradients and parameters travel in (--wire-dtype):
// float32 as computed, or rounded to 16 bits, halving the bytes on the wire.
// Computation, master weights and optimizer state stay float32 everywhere;
// only the bytes between processes change. Torch-free.
//
// Rounding is to nearest, ties to even. fp16 (IEEE binary16) keeps 11
// significant bits but only reaches 65504 and flushes below 6e-8 to zero;
// bf16 keeps float32's range with 8 significant bits. Values beyond fp16's
// range become infinity, which the caller's loss then shows.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/enum_names.hpp"
#include "tandem/wire_dtype.hpp"

namespace tandem {

inline constexpr EnumNames<WireDtype, 3> kWireDtypeNames = {
    {{WireDtype::kFloat32, "fp32"}, {WireDtype::kFloat16, "fp16"}, {WireDtype::kBfloat16, "bf16"}}};

// "fp32", "fp16", "bf16" and back (parse also takes float32, float16 and
// bfloat16); parse throws InputError naming `flag`.
std::string wireDtypeName(WireDtype dtype);
WireDtype parseWireDtype(std::string_view text, std::string_view flag = "--wire-dtype");

// Bytes one value takes on the wire.
constexpr size_t wireBytes(WireDtype dtype) { return dtype == WireDtype::kFloat32 ? 4 : 2; }

uint16_t floatToHalf(float value);
float halfToFloat(uint16_t bits);
uint16_t floatToBfloat16(float value);
float bfloat16ToFloat(uint16_t bits);

// The bulk functions below run eight values at a time where the CPU has
// AVX2 and F16C, with the same results as the scalar ones; false forces the
// scalar code (tests compare the two).
extern bool wireSimdEnabled;

// `n` floats into wireBytes(dtype) * n bytes at `out`, and back.
void encodeWire(WireDtype dtype, const float* in, void* out, size_t n);
void decodeWire(WireDtype dtype, const void* in, float* out, size_t n);
// out[i] += value i of `in` (a server summing workers' pushes in float32).
void decodeAddWire(WireDtype dtype, const void* in, float* out, size_t n);

// Error feedback: sends in[i] + residual[i] rounded, and keeps what rounding
// lost in residual[i] for the next call. What arrives over many calls then
// adds up to what was meant, short of one rounding (the last residual).
void encodeWireWithFeedback(WireDtype dtype, const float* in, float* residual, void* out, size_t n);

// a[i] = round(a[i] + b[i]) on 16-bit values, adding in float32: the
// reduction Gloo runs on 16-bit all-reduce buffers. `c` may alias `a`.
void sumWire16(WireDtype dtype, void* c, const void* a, const void* b, size_t n);

}  // namespace tandem
