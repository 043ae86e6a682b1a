// Every registered model runs a forward pass at its default input and yields
// [N, num_classes]; the small ones also at Fashion-MNIST size and at the
// minimum size that createModel accepts.
#include <gtest/gtest.h>

#include "models/registry.hpp"

namespace tandem::models {
namespace {

torch::Tensor runEval(const std::string& name, const InputSpec& input, int64_t batch = 2) {
  auto model = createModel(name, input);
  model->eval();
  torch::NoGradGuard noGrad;
  return model->forward(torch::randn({batch, input.channels, input.height, input.width}));
}

class ModelsForwardDefault : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelsForwardDefault, LogitsShape) {
  const auto& infos = listModels();
  auto it = std::find_if(infos.begin(), infos.end(), [](const ModelInfo& i) { return i.name == GetParam(); });
  ASSERT_NE(it, infos.end());
  const InputSpec& input = it->default_input;
  auto out = runEval(GetParam(), input);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, input.num_classes}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

std::vector<std::string> registeredNames() {
  std::vector<std::string> names;
  for (const auto& info : listModels()) names.push_back(info.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelsForwardDefault, ::testing::ValuesIn(registeredNames()),
                         [](const auto& info) { return info.param; });

TEST(ModelsForward, TrainModeBackwardOnFashionMnistShape) {
  // resnet20 and cnn are the models the Fashion-MNIST runs use: check the
  // training path (batch-statistics BN, gradients) at 1x28x28.
  const InputSpec fashion{1, 28, 28, 10};
  for (const std::string name : {"resnet20", "cnn"}) {
    auto model = createModel(name, fashion);
    model->train();
    auto out = model->forward(torch::randn({2, 1, 28, 28}));
    ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 10})) << name;
    out.sum().backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << name << " " << p.key();
    }
  }
}

TEST(ModelsForward, CifarResNetOnOddSides) {
  // 28 -> 14 -> 7 and 27 -> 14 -> 7: the option-A shortcut's strided slice
  // must line up with the strided conv.
  EXPECT_EQ(runEval("resnet32", {3, 27, 29, 5}).sizes(), (std::vector<int64_t>{2, 5}));
}

TEST(ModelsForward, RunsAtMinimumAcceptedSize) {
  EXPECT_EQ(runEval("inception_v3", {3, 75, 75, 7}).sizes(), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(runEval("alexnet", {3, 63, 63, 7}).sizes(), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(runEval("cnn", {1, 3, 3, 7}).sizes(), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(runEval("resnet50", {3, 1, 1, 7}).sizes(), (std::vector<int64_t>{2, 7}));
}

TEST(ModelsForward, CnnOnCifarSize) {
  EXPECT_EQ(runEval("cnn", {3, 32, 32, 10}).sizes(), (std::vector<int64_t>{2, 10}));
}

}  // namespace
}  // namespace tandem::models
