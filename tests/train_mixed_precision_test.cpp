#include "train/mixed_precision.hpp"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <limits>

#include "core/error.hpp"

namespace tandem::train {
namespace {

TEST(MixedPrecisionTest, AutocastRunsTheForwardInBfloat16AndRestoresTheState) {
  torch::nn::Linear layer(8, 4);
  const torch::Tensor x = torch::randn({2, 8});
  {
    AutocastScope autocast(torch::kCPU, Amp::kBf16);
    EXPECT_EQ(layer(x).scalar_type(), torch::kBFloat16);
    {
      AutocastScope off(torch::kCPU, Amp::kOff);  // nothing: still under the outer scope
      EXPECT_EQ(layer(x).scalar_type(), torch::kBFloat16);
    }
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
  EXPECT_EQ(layer(x).scalar_type(), torch::kFloat32);
  EXPECT_EQ(layer->weight.scalar_type(), torch::kFloat32);  // master weights stay float32
}

TEST(MixedPrecisionTest, UnscalingDividesEveryGradientAndFindsOverflow) {
  torch::Tensor a = torch::zeros({2}, torch::requires_grad());
  torch::Tensor b = torch::zeros({3}, torch::requires_grad());
  a.mutable_grad() = torch::tensor({2.0F, 4.0F});
  b.mutable_grad() = torch::tensor({8.0F, -6.0F, 0.5F});
  EXPECT_FALSE(unscaleGradients({a, b}, 2.0));
  EXPECT_TRUE(torch::equal(a.grad(), torch::tensor({1.0F, 2.0F})));
  EXPECT_TRUE(torch::equal(b.grad(), torch::tensor({4.0F, -3.0F, 0.25F})));
  b.mutable_grad()[1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(unscaleGradients({a, b}, 1.0));
  b.mutable_grad()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(unscaleGradients({a, b}, 1.0));
}

TEST(MixedPrecisionTest, ChannelsLastKeepsValuesAndTheOptimizersReferences) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 4, 3));
  const torch::Tensor before = conv->weight.detach().clone();
  torch::optim::SGD sgd(conv->parameters(), torch::optim::SGDOptions(0.1));
  toChannelsLast(*conv);
  EXPECT_TRUE(conv->weight.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(conv->weight, before));
  conv(torch::randn({1, 3, 5, 5}).contiguous(at::MemoryFormat::ChannelsLast)).sum().backward();
  sgd.step();
  EXPECT_FALSE(torch::equal(conv->weight, before));  // the optimizer updated the relaid-out weight
}

TEST(MixedPrecisionTest, AmpNamesAreTheFlagsAndTheConfigsJson) {
  EXPECT_EQ(parseEnum(kAmpNames, "off", "--amp"), Amp::kOff);
  EXPECT_EQ(parseEnum(kAmpNames, "bf16", "--amp"), Amp::kBf16);
  EXPECT_EQ(enumName(kAmpNames, parseEnum(kAmpNames, "fp16", "--amp")), "fp16");
  EXPECT_THROW(parseEnum(kAmpNames, "fp8", "--amp"), InputError);
  TrainConfig c;
  c.amp = Amp::kFp16;
  EXPECT_EQ(toJson(c)["amp"], "fp16");
  EXPECT_EQ(trainConfigFromJson(toJson(c)).amp, Amp::kFp16);
  EXPECT_THROW(trainConfigFromJson({{"amp", "fp8"}}), InputError);
}

}  // namespace
}  // namespace tandem::train
