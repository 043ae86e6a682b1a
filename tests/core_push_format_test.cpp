// 8- and 4-bit pushes: a float32 scale per block, codes rounded to its
// multiples, and error feedback that makes many pushes add up.
#include "core/push_format.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/wire_encoder.hpp"

namespace tandem {
namespace {

const PushFormat kInt8{WireDtype::kFloat32, 8};
const PushFormat kInt4{WireDtype::kFloat32, 4};

std::vector<float> roundTrip(const PushFormat& f, const std::vector<float>& in, std::vector<float>* residual = nullptr) {
  std::vector<unsigned char> bytes(f.bytes(in.size()));
  f.encode(in.data(), residual ? residual->data() : nullptr, bytes.data(), in.size());
  std::vector<float> out(in.size());
  f.decode(bytes.data(), out.data(), in.size());
  return out;
}

TEST(PushFormat, BytesAreTheBlocksScalesAndTheCodes) {
  EXPECT_EQ(kInt8.bytes(300), 3 * 4 + 300u);  // blocks of 128: 3 scales
  EXPECT_EQ(kInt4.bytes(301), 3 * 4 + 151u);  // two codes a byte, the last alone
  EXPECT_EQ(kInt8.bytes(128), 4 + 128u);
  EXPECT_EQ((PushFormat{WireDtype::kFloat16, 0}).bytes(10), 20u);
  EXPECT_EQ((PushFormat{WireDtype::kBfloat16, 8}).bytes(10), 4 + 10u);  // bits win over the wire
  EXPECT_EQ(kInt4.name(), "int4");
  EXPECT_EQ((PushFormat{WireDtype::kBfloat16, 0}).name(), "bf16");
  EXPECT_TRUE(PushFormat{}.raw());
  EXPECT_FALSE(kInt8.raw());
}

// Worked by hand: the scale is the largest magnitude over 7 (4 bits) or
// 127 (8 bits); halves round away from zero.
TEST(PushFormat, CodesAreTheNearestMultiplesOfTheBlocksScale) {
  EXPECT_EQ(roundTrip(kInt4, {7.0f, -3.5f, 1.2f, 0.0f, -7.0f}), (std::vector<float>{7, -4, 1, 0, -7}));
  EXPECT_EQ(roundTrip(kInt8, {127.0f, -63.5f, 0.49f, 12.3f}), (std::vector<float>{127, -64, 0, 12}));
  EXPECT_EQ(roundTrip(kInt8, {0.0f, 0.0f}), (std::vector<float>{0, 0}));
}

// Each block has its own scale: a large value costs only its own block's
// precision, and every value is within half its block's step.
TEST(PushFormat, EachBlockKeepsItsOwnScale) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> in(3 * kQuantBlock + 5);
  for (float& v : in) v = normal(rng);
  in[10] = 1000.0f;  // block 0 only
  in[kQuantBlock + 1] = 1e-3f;  // well above block 1's half step, even at 4 bits
  for (const PushFormat& f : {kInt8, kInt4}) {
    const std::vector<float> out = roundTrip(f, in);
    const float top = f.bits == 8 ? 127.0f : 7.0f;
    for (size_t b = 0; b * kQuantBlock < in.size(); ++b) {
      float largest = 0;
      const size_t end = std::min(in.size(), (b + 1) * kQuantBlock);
      for (size_t i = b * kQuantBlock; i < end; ++i) largest = std::max(largest, std::fabs(in[i]));
      const float step = largest / top;
      for (size_t i = b * kQuantBlock; i < end; ++i) {
        ASSERT_LE(std::fabs(out[i] - in[i]), step / 2 * 1.0001f) << f.name() << " value " << i;
      }
    }
    EXPECT_EQ(out[10], 1000.0f);
    EXPECT_NE(out[kQuantBlock + 1], 0.0f) << f.name() << ": block 1 was flattened by block 0's value";
  }
}

// A value far below its block's step is lost to every push without
// feedback; with it, what arrives over many pushes adds up to what was
// meant, short of one step.
TEST(PushFormat, ErrorFeedbackMakesManyPushesAddUp) {
  std::vector<float> in(kQuantBlock, 0.001f);
  in[0] = 1.0f;  // the block's scale: a step of 1/7 at 4 bits
  for (bool feedback : {false, true}) {
    std::vector<float> residual(in.size(), 0.0f);
    double arrived = 0;
    for (int push = 0; push < 1000; ++push) arrived += roundTrip(kInt4, in, feedback ? &residual : nullptr)[5];
    if (feedback) {
      EXPECT_NEAR(arrived, 1.0, 1.0 / 7) << "1000 pushes of 0.001";
    } else {
      EXPECT_EQ(arrived, 0.0);
    }
  }
}

TEST(PushFormat, ANonFiniteBlockArrivesAsNaNAndLeavesNoResidual) {
  std::vector<float> in(2 * kQuantBlock, 0.5f);
  in[3] = std::numeric_limits<float>::infinity();
  std::vector<float> residual(in.size(), 0.25f);
  const std::vector<float> out = roundTrip(kInt8, in, &residual);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[kQuantBlock - 1]));
  EXPECT_EQ(residual[0], 0.0f);
  EXPECT_FLOAT_EQ(out[kQuantBlock], 0.75f);  // block 1: 0.5 + its residual, at its scale
  EXPECT_NEAR(residual[kQuantBlock], 0.0f, 1e-7);
}

// Below float's smallest normal the block sends zeros, and the values wait
// in the residual instead of overflowing 1 / scale.
TEST(PushFormat, ATinyBlockSendsZerosAndKeepsItsValues) {
  const float tiny = std::numeric_limits<float>::denorm_min() * 64;
  std::vector<float> in(4, tiny), residual(4, 0.0f);
  EXPECT_EQ(roundTrip(kInt8, in, &residual), std::vector<float>(4, 0.0f));
  EXPECT_EQ(residual, in);
}

TEST(PushFormat, DecodeAddsAndReadsAPayloadAtAnyOffset) {
  const std::vector<float> in{3.0f, -1.0f, 2.0f};
  std::vector<unsigned char> bytes(1 + kInt4.bytes(3));
  kInt4.encode(in.data(), nullptr, bytes.data() + 1, 3);  // a scale at an odd address
  std::vector<float> out{10.0f, 10.0f, 10.0f};
  kInt4.decodeAdd(bytes.data() + 1, out.data(), 3);
  // scale 3/7: 3 -> 7 steps, -1 -> -2 steps (-0.857), 2 -> 5 steps (2.143)
  EXPECT_FLOAT_EQ(out[0], 13.0f);
  EXPECT_FLOAT_EQ(out[1], 10.0f - 2 * 3.0f / 7);
  EXPECT_FLOAT_EQ(out[2], 10.0f + 5 * 3.0f / 7);
}

TEST(PushFormat, TheEncoderKeepsAResidualPerSlot) {
  WireEncoder encoder(kInt8, true, 2);
  std::vector<float> in(kQuantBlock, 0.001f);
  in[0] = 1.0f;
  const std::vector<float> zeros(kQuantBlock, 0.0f);
  double arrived = 0, other = 0;
  for (int push = 0; push < 200; ++push) {
    std::vector<float> out(kQuantBlock);
    kInt8.decode(encoder.encode(0, in.data(), in.size()), out.data(), out.size());
    arrived += out[1];
    kInt8.decode(encoder.encode(1, zeros.data(), zeros.size()), out.data(), out.size());
    other += out[1];
  }
  EXPECT_NEAR(arrived, 0.2, 1.0 / 127);
  EXPECT_EQ(other, 0.0) << "slot 1 took slot 0's residual";
}

TEST(PushFormat, OnlyEightOrFourBits) {
  EXPECT_EQ(checkPushBits(8), 8);
  EXPECT_EQ(checkPushBits(0), 0);
  try {
    checkPushBits(3);
    FAIL() << "3 bits taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--push-bits 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
