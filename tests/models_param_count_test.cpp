// Parameter counts pin each architecture to its reference: an off-by-one
// channel or a stray bias shows up here before it skews a benchmark.
#include <gtest/gtest.h>

#include <cmath>

#include "models/registry.hpp"

namespace tandem::models {
namespace {

int64_t countFor(const std::string& name, const InputSpec& input, const ModelOptions& options = {}) {
  return countParameters(*createModel(name, input, options));
}

constexpr InputSpec kImageNet{3, 224, 224, 1000};
constexpr InputSpec kCifar{3, 32, 32, 10};

TEST(ModelsParamCount, TorchvisionReferenceCounts) {
  EXPECT_EQ(countFor("alexnet", kImageNet), 61'100'840);
  EXPECT_EQ(countFor("resnet50", kImageNet), 25'557'032);
  EXPECT_EQ(countFor("resnet152", kImageNet), 60'192'808);
  // torchvision's 27,161,264 minus the aux head's 3,326,696.
  EXPECT_EQ(countFor("inception_v3", {3, 299, 299, 1000}), 23'834'568);
}

TEST(ModelsParamCount, CifarResNetsExact) {
  EXPECT_EQ(countFor("resnet20", kCifar), 269'722);
  EXPECT_EQ(countFor("resnet32", kCifar), 464'154);
  EXPECT_EQ(countFor("resnet44", kCifar), 658'586);
  EXPECT_EQ(countFor("resnet56", kCifar), 853'018);
  EXPECT_EQ(countFor("resnet110", kCifar), 1'727'962);
}

TEST(ModelsParamCount, CifarResNetsMatchPaper) {
  // He et al. 2016, table 6.
  const std::vector<std::pair<std::string, double>> paper{
      {"resnet20", 0.27e6}, {"resnet56", 0.85e6}, {"resnet110", 1.7e6}};
  for (const auto& [name, expected] : paper) {
    const auto actual = static_cast<double>(countFor(name, kCifar));
    EXPECT_LT(std::abs(actual - expected) / expected, 0.02) << name << " has " << actual;
  }
}

TEST(ModelsParamCount, CifarResNetOnGreyscaleOnlyChangesFirstConv) {
  // 3 -> 1 input channels removes 2 * 16 * 3 * 3 weights of the first conv.
  EXPECT_EQ(countFor("resnet20", {1, 28, 28, 10}), 269'722 - 2 * 16 * 9);
}

TEST(ModelsParamCount, MlpDefaultWidths) {
  // 256-4096-4096-256 with biases.
  const int64_t expected = (256 * 4096 + 4096) + (4096 * 4096 + 4096) + (4096 * 256 + 256);
  EXPECT_EQ(countFor("mlp", {256, 1, 1, 256}), expected);
  EXPECT_EQ(expected, 18'882'816);
}

TEST(ModelsParamCount, MlpCustomWidths) {
  ModelOptions options;
  options.mlp_widths = {100, 50};
  // The input is flattened: 1x28x28 -> 784 features.
  EXPECT_EQ(countFor("mlp", {1, 28, 28, 10}, options), (784 * 100 + 100) + (100 * 50 + 50) + (50 * 10 + 10));
  options.mlp_widths = {};
  EXPECT_EQ(countFor("mlp", {1, 28, 28, 10}, options), 784 * 10 + 10);
}

TEST(ModelsParamCount, CnnFlattenFollowsInputSize) {
  // conv1 3x3xCx8 and conv2 3x3x8x16 without bias, two BatchNorms, fc1 from
  // 16 x final^2 features to 128, fc2 128 -> 10. The stride-2 conv1 rounds
  // the side up and the pool rounds it down: 28 -> 14 -> 7, 27 -> 14 -> 7.
  auto expected = [](int64_t channels, int64_t finalSide) {
    const int64_t convs = 9 * channels * 8 + 2 * 8 + 9 * 8 * 16 + 2 * 16;
    return convs + (16 * finalSide * finalSide * 128 + 128) + (128 * 10 + 10);
  };
  EXPECT_EQ(countFor("cnn", {1, 28, 28, 10}), expected(1, 7));
  EXPECT_EQ(expected(1, 7), 103'042);
  EXPECT_EQ(countFor("cnn", {3, 32, 32, 10}), expected(3, 8));
  EXPECT_EQ(countFor("cnn", {1, 27, 27, 10}), expected(1, 7));
  EXPECT_EQ(countFor("cnn", {1, 26, 26, 10}), expected(1, 6));
  // Without BatchNorm (2 x 8 + 2 x 16 parameters) the convs gain biases (8 + 16).
  EXPECT_EQ(countFor("cnn_nobn", {1, 28, 28, 10}), expected(1, 7) - (2 * 8 + 2 * 16) + (8 + 16));
}

TEST(ModelsParamCount, FrozenParametersAreNotCounted) {
  auto model = createModel("resnet20", kCifar);
  const int64_t all = countParameters(*model);
  model->named_parameters()["fc.weight"].set_requires_grad(false);
  EXPECT_EQ(countParameters(*model), all - 64 * 10);
}

}  // namespace
}  // namespace tandem::models
