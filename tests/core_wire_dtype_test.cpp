#include "core/wire_dtype.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace tandem {
namespace {

float decode1(WireDtype d, uint16_t bits) { return d == WireDtype::kFloat16 ? halfToFloat(bits) : bfloat16ToFloat(bits); }
uint16_t encode1(WireDtype d, float v) { return d == WireDtype::kFloat16 ? floatToHalf(v) : floatToBfloat16(v); }

// Half a unit in the last place of the dtype at x: what rounding to nearest
// may lose (subnormals share the smallest normal's spacing).
double halfUlp(WireDtype d, double x) {
  const int bits = d == WireDtype::kFloat16 ? 11 : 8;
  const double min_normal = d == WireDtype::kFloat16 ? 0x1p-14 : 0x1p-126;
  return std::ldexp(1.0, std::ilogb(std::max(std::fabs(x), min_normal)) - bits);
}

TEST(WireDtype, ParsesNamesAndRefusesOthersNamingTheFlag) {
  EXPECT_EQ(parseWireDtype("fp16"), WireDtype::kFloat16);
  EXPECT_EQ(parseWireDtype("bf16"), WireDtype::kBfloat16);
  EXPECT_EQ(parseWireDtype("fp32"), WireDtype::kFloat32);
  EXPECT_EQ(wireDtypeName(WireDtype::kBfloat16), "bf16");
  EXPECT_EQ(wireBytes(WireDtype::kFloat16), 2u);
  try {
    parseWireDtype("int8");
    FAIL() << "int8 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--wire-dtype int8"), std::string::npos) << e.what();
  }
}

#ifdef __FLT16_MAX__
// The compiler's own _Float16 conversions are an independent reference.
TEST(WireDtype, Fp16MatchesTheCompilersConversionsBitForBit) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float mine = halfToFloat(static_cast<uint16_t>(h));
    const float theirs = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h)));
    if (std::isnan(theirs)) {
      ASSERT_TRUE(std::isnan(mine)) << std::hex << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(mine), std::bit_cast<uint32_t>(theirs)) << std::hex << h;
    }
  }
  // Every 251st float bit pattern (all exponents, odd strides through the
  // mantissa), plus the ties and edges that a stride would miss.
  std::vector<float> probes = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.99f, 65520.0f,
                               0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f - 0x1p-25f, -0.0f};
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 251) probes.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  for (float f : probes) {
    const uint16_t theirs = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
    } else {
      ASSERT_EQ(floatToHalf(f), theirs) << f;
    }
  }
}
#endif

TEST(WireDtype, RoundsToTheNearestNeighbourTiesToEven) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-30, 14);
  for (WireDtype d : {WireDtype::kFloat16, WireDtype::kBfloat16}) {
    for (int i = 0; i < 200000; ++i) {
      const float x = std::ldexp(mantissa(rng), exponent(rng));
      const uint16_t r = encode1(d, x);
      const double got = decode1(d, r);
      ASSERT_LE(std::fabs(got - x), halfUlp(d, x)) << wireDtypeName(d) << " " << x;
      // Neither neighbour is nearer.
      for (int step : {-1, 1}) {
        const double other = decode1(d, static_cast<uint16_t>(r + step));
        if (std::isfinite(other) && std::signbit(other) == std::signbit(got)) {
          ASSERT_GE(std::fabs(other - x), std::fabs(got - x)) << wireDtypeName(d) << " " << x;
        }
      }
    }
  }
  // Ties go to the even mantissa.
  EXPECT_EQ(floatToBfloat16(1.0f + 0x1p-8f), floatToBfloat16(1.0f));
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isinf(halfToFloat(floatToHalf(70000.0f))));
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(70000.0f)), 70144.0f);  // bf16 keeps float32's range
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(WireDtype, EncodeDecodeAndServerSumsAgreeWithTheScalarConversions) {
  const std::vector<float> values = {0.1f, -3.75f, 1e-3f, 2.5e-6f, 1234.5f};
  for (WireDtype d : {WireDtype::kFloat32, WireDtype::kFloat16, WireDtype::kBfloat16}) {
    std::vector<std::byte> wire(values.size() * wireBytes(d));
    encodeWire(d, values.data(), wire.data(), values.size());
    std::vector<float> back(values.size()), sum(values.size(), 1.0f);
    decodeWire(d, wire.data(), back.data(), back.size());
    decodeAddWire(d, wire.data(), sum.data(), sum.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const float expected = d == WireDtype::kFloat32 ? values[i] : decode1(d, encode1(d, values[i]));
      EXPECT_EQ(back[i], expected);
      EXPECT_EQ(sum[i], 1.0f + expected);
    }
  }
}

TEST(WireDtype, SumOfSixteenBitValuesIsTheRoundedFloatSum) {
  for (WireDtype d : {WireDtype::kFloat16, WireDtype::kBfloat16}) {
    std::vector<uint16_t> a = {encode1(d, 1.0f), encode1(d, 0.3f), encode1(d, -2.0f)};
    const std::vector<uint16_t> b = {encode1(d, 0x1p-12f), encode1(d, 0.3f), encode1(d, 2.0f)};
    std::vector<uint16_t> expected;
    for (size_t i = 0; i < a.size(); ++i) expected.push_back(encode1(d, decode1(d, a[i]) + decode1(d, b[i])));
    sumWire16(d, a.data(), a.data(), b.data(), a.size());
    EXPECT_EQ(a, expected) << wireDtypeName(d);
    EXPECT_EQ(decode1(d, a[2]), 0.0f);
  }
}

// A gradient that no 16-bit value holds, sent 1,000 times: without feedback
// the shortfall grows with every step; with it, what arrived in total stays
// within one rounding of what was meant, and the residual stays bounded.
TEST(WireDtype, ErrorFeedbackKeepsTheAccumulatedErrorBoundedOverAThousandSteps) {
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 1e-4f);
  for (WireDtype d : {WireDtype::kFloat16, WireDtype::kBfloat16}) {
    constexpr size_t kValues = 64;
    std::vector<float> residual(kValues, 0.0f), grad(kValues);
    std::vector<uint16_t> wire(kValues);
    std::vector<double> meant(kValues, 0.0), with_feedback(kValues, 0.0), without(kValues, 0.0);
    double worst_residual = 0, worst_bound_ratio = 0;
    for (int step = 0; step < 1000; ++step) {
      for (size_t i = 0; i < kValues; ++i) grad[i] = 1e-3f * (1.0f + 1.0f / 3.0f) * (1 + static_cast<float>(i)) + noise(rng);
      for (size_t i = 0; i < kValues; ++i) {
        meant[i] += grad[i];
        without[i] += decode1(d, encode1(d, grad[i]));
      }
      std::vector<float> before = residual;
      encodeWireWithFeedback(d, grad.data(), residual.data(), wire.data(), kValues);
      for (size_t i = 0; i < kValues; ++i) {
        with_feedback[i] += decode1(d, wire[i]);
        worst_residual = std::max(worst_residual, std::fabs(static_cast<double>(residual[i])));
        const double bound = halfUlp(d, static_cast<double>(grad[i]) + before[i]);
        worst_bound_ratio = std::max(worst_bound_ratio, std::fabs(static_cast<double>(residual[i])) / bound);
      }
    }
    double drift_with = 0, drift_without = 0, scale = 0;
    for (size_t i = 0; i < kValues; ++i) {
      drift_with = std::max(drift_with, std::fabs(with_feedback[i] - meant[i]));
      drift_without = std::max(drift_without, std::fabs(without[i] - meant[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(grad[i])));
    }
    SCOPED_TRACE(wireDtypeName(d));
    EXPECT_LE(worst_bound_ratio, 1.0 + 1e-6);          // each residual is one rounding's worth
    EXPECT_LE(worst_residual, halfUlp(d, 2 * scale));  // never more than one rounding of a gradient
    EXPECT_LE(drift_with, halfUlp(d, 2 * scale) * 1.01);
    EXPECT_GT(drift_without, 20 * drift_with);  // the case feedback is for
  }
}

// The eight-at-a-time code (AVX2/F16C, where this CPU has it) against the
// scalar code, value for value, on odd lengths with every kind of value.
TEST(WireDtype, VectorAndScalarCodeAgreeBitForBit) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr size_t kN = 1003;
  std::vector<float> in(kN), residual(kN);
  for (size_t i = 0; i < kN; ++i) {
    in[i] = i % 3 == 0 ? std::bit_cast<float>(any_bits(rng)) : normal(rng) * std::ldexp(1.0f, static_cast<int>(i % 40) - 30);
    residual[i] = normal(rng) * 1e-4f;
  }
  in[5] = std::numeric_limits<float>::quiet_NaN();
  in[6] = std::numeric_limits<float>::infinity();
  in[7] = 65519.0f;
  in[8] = 0x1p-25f;
  auto bitsOf = [](const std::vector<float>& v) {
    std::vector<uint32_t> b;
    for (float f : v) b.push_back(std::isnan(f) ? 0x7fc00000u : std::bit_cast<uint32_t>(f));
    return b;
  };
  for (WireDtype d : {WireDtype::kFloat16, WireDtype::kBfloat16}) {
    SCOPED_TRACE(wireDtypeName(d));
    struct Outputs {
      std::vector<uint16_t> encoded, fed, summed;
      std::vector<float> decoded, added, residual;
    };
    auto run = [&](bool simd) {
      wireSimdEnabled = simd;
      Outputs o{std::vector<uint16_t>(kN), std::vector<uint16_t>(kN), std::vector<uint16_t>(kN),
                std::vector<float>(kN), std::vector<float>(kN, 0.5f), residual};
      encodeWire(d, in.data(), o.encoded.data(), kN);
      decodeWire(d, o.encoded.data(), o.decoded.data(), kN);
      decodeAddWire(d, o.encoded.data(), o.added.data(), kN);
      encodeWireWithFeedback(d, in.data(), o.residual.data(), o.fed.data(), kN);
      std::vector<uint16_t> reversed(o.encoded.rbegin(), o.encoded.rend());
      sumWire16(d, o.summed.data(), o.encoded.data(), reversed.data(), kN);
      wireSimdEnabled = true;
      return o;
    };
    const Outputs scalar = run(false), vector = run(true);
    auto canonical = [&](std::vector<uint16_t> v) {  // NaN payloads may differ
      for (auto& b : v) {
        if (std::isnan(decode1(d, b))) b = 0x7fff;
      }
      return v;
    };
    EXPECT_EQ(canonical(vector.encoded), canonical(scalar.encoded));
    EXPECT_EQ(canonical(vector.fed), canonical(scalar.fed));
    EXPECT_EQ(canonical(vector.summed), canonical(scalar.summed));
    EXPECT_EQ(bitsOf(vector.decoded), bitsOf(scalar.decoded));
    EXPECT_EQ(bitsOf(vector.added), bitsOf(scalar.added));
    EXPECT_EQ(bitsOf(vector.residual), bitsOf(scalar.residual));
  }
}

TEST(WireDtype, FeedbackDropsTheResidualOfAnOverflow) {
  std::vector<float> residual = {0.0f};
  const std::vector<float> huge = {1e6f};
  uint16_t wire = 0;
  encodeWireWithFeedback(WireDtype::kFloat16, huge.data(), residual.data(), &wire, 1);
  EXPECT_TRUE(std::isinf(halfToFloat(wire)));
  EXPECT_EQ(residual[0], 0.0f);
}

}  // namespace
}  // namespace tandem
