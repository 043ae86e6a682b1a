// The one encoder behind all-reduce buckets and PS pushes.
#include "core/wire_encoder.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace tandem {
namespace {

std::vector<float> decoded(WireDtype wire, const void* bits, size_t n) {
  std::vector<float> out(n);
  decodeWire(wire, bits, out.data(), n);
  return out;
}

TEST(WireEncoder, EachSlotKeepsItsOwnBufferAcrossEncodes) {
  WireEncoder encoder(WireDtype::kBfloat16, false, 2);
  const std::vector<float> a{1.0f, 2.5f, -3.0f}, b{0.25f, 8.0f};
  const void* slot0 = encoder.encode(0, a.data(), a.size());
  const void* slot1 = encoder.encode(1, b.data(), b.size());
  EXPECT_EQ(decoded(WireDtype::kBfloat16, slot0, 3), a);  // exact in bf16
  EXPECT_EQ(decoded(WireDtype::kBfloat16, slot1, 2), b);
  const std::vector<float> a2{4.0f, 5.0f, 6.0f};
  EXPECT_EQ(encoder.encode(0, a2.data(), a2.size()), slot0);  // the same bytes' home every time
  EXPECT_EQ(decoded(WireDtype::kBfloat16, slot1, 2), b);      // slot 1 untouched
}

// Without feedback a value below half a 16-bit step is lost every time;
// with it, what arrives adds up to what was sent, short of one rounding.
TEST(WireEncoder, ErrorFeedbackCarriesEachSlotsRoundingIntoItsNextEncode) {
  const float small = 1.0f + 1.0f / 512;  // bf16 keeps 8 bits: rounds to 1.0
  const std::vector<float> in(4, small);
  for (bool feedback : {false, true}) {
    WireEncoder encoder(WireDtype::kBfloat16, feedback, 2);
    double sent = 0, arrived = 0, other = 0;
    for (int step = 0; step < 256; ++step) {
      sent += small;
      arrived += decoded(WireDtype::kBfloat16, encoder.encode(0, in.data(), 4), 4)[2];
      const std::vector<float> zeros(4, 0.0f);
      other += decoded(WireDtype::kBfloat16, encoder.encode(1, zeros.data(), 4), 4)[2];
    }
    EXPECT_EQ(other, 0.0) << "slot 1 took slot 0's residual";
    if (feedback) {
      EXPECT_LT(std::abs(arrived - sent), 1.0 / 128) << arrived << " of " << sent;
    } else {
      EXPECT_DOUBLE_EQ(arrived, 256.0);  // a quarter step lost each time: 0.5 in all
    }
  }
}

TEST(WireEncoder, ASlotKeepsItsSizeAndFloat32HasNothingToEncode) {
  WireEncoder encoder(WireDtype::kFloat16, true);
  const std::vector<float> v(8, 0.5f);
  encoder.encode(3, v.data(), 8);  // grows to hold slot 3
  EXPECT_THROW(encoder.encode(3, v.data(), 4), Error);
  EXPECT_THROW(WireEncoder(WireDtype::kFloat32, false), Error);
}

}  // namespace
}  // namespace tandem
