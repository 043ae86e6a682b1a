// Registry behaviour: the name list, errors for bad names and inputs, seeded
// determinism of construction, and stable parameter names for checkpoints.
#include <gtest/gtest.h>

#include <sstream>

#include "core/error.hpp"
#include "models/registry.hpp"

namespace tandem::models {
namespace {

constexpr InputSpec kCifarInput{3, 32, 32, 10};

// Returns the InputError message, or fails the test when none is thrown.
std::string inputErrorOf(const std::string& name, const InputSpec& input) {
  try {
    createModel(name, input);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "createModel(" << name << ") did not throw InputError";
  return {};
}

TEST(ModelsRegistry, ListsEveryModelSortedByName) {
  std::vector<std::string> names;
  for (const auto& info : listModels()) {
    names.push_back(info.name);
    EXPECT_FALSE(info.description.empty()) << info.name;
  }
  const std::vector<std::string> expected{"alexnet",  "cnn",       "cnn_nobn",  "inception_v3",
                                          "mlp",      "resnet110", "resnet152", "resnet20",
                                          "resnet32", "resnet44",  "resnet50",  "resnet56"};
  EXPECT_EQ(names, expected);
}

TEST(ModelsRegistry, DefaultInputs) {
  auto find = [](const std::string& name) {
    for (const auto& info : listModels()) {
      if (info.name == name) return info.default_input;
    }
    ADD_FAILURE() << name << " not listed";
    return InputSpec{};
  };
  auto spec = [](const InputSpec& s) { return std::vector<int64_t>{s.channels, s.height, s.width, s.num_classes}; };
  EXPECT_EQ(spec(find("mlp")), (std::vector<int64_t>{256, 1, 1, 256}));
  EXPECT_EQ(spec(find("resnet56")), (std::vector<int64_t>{3, 32, 32, 10}));
  EXPECT_EQ(spec(find("alexnet")), (std::vector<int64_t>{3, 224, 224, 1000}));
  EXPECT_EQ(spec(find("resnet152")), (std::vector<int64_t>{3, 224, 224, 1000}));
  EXPECT_EQ(spec(find("inception_v3")), (std::vector<int64_t>{3, 299, 299, 1000}));
  EXPECT_EQ(spec(find("cnn")), (std::vector<int64_t>{1, 28, 28, 10}));
}

TEST(ModelsRegistry, UnknownNameListsKnownModels) {
  const std::string message = inputErrorOf("resnet21", kCifarInput);
  EXPECT_NE(message.find("unknown model 'resnet21'"), std::string::npos) << message;
  EXPECT_NE(message.find("alexnet, cnn, cnn_nobn, inception_v3"), std::string::npos) << message;
  EXPECT_NE(message.find("resnet56"), std::string::npos) << message;
}

TEST(ModelsRegistry, TooSmallInputNamesModelAndMinimum) {
  std::string message = inputErrorOf("inception_v3", {3, 74, 299, 1000});
  EXPECT_NE(message.find("inception_v3"), std::string::npos) << message;
  EXPECT_NE(message.find("75x75"), std::string::npos) << message;
  EXPECT_NE(message.find("74x299"), std::string::npos) << message;

  message = inputErrorOf("alexnet", {3, 224, 62, 1000});
  EXPECT_NE(message.find("alexnet"), std::string::npos) << message;
  EXPECT_NE(message.find("63x63"), std::string::npos) << message;

  message = inputErrorOf("cnn", {1, 2, 28, 10});
  EXPECT_NE(message.find("cnn"), std::string::npos) << message;
  EXPECT_NE(message.find("3x3"), std::string::npos) << message;
}

TEST(ModelsRegistry, NonPositiveShapeIsInputError) {
  EXPECT_NE(inputErrorOf("resnet20", {0, 32, 32, 10}).find("resnet20"), std::string::npos);
  EXPECT_NE(inputErrorOf("mlp", {256, 1, 1, 0}).find("mlp"), std::string::npos);
  ModelOptions options;
  options.mlp_widths = {128, 0};
  EXPECT_THROW(createModel("mlp", {256, 1, 1, 10}, options), InputError);
}

// Parameters and buffers, by name, as plain tensors.
std::vector<std::pair<std::string, torch::Tensor>> stateOf(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& p : module.named_parameters()) state.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers()) state.emplace_back(b.key(), b.value());
  return state;
}

bool sameState(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto sa = stateOf(a);
  const auto sb = stateOf(b);
  if (sa.size() != sb.size()) return false;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].first != sb[i].first || !torch::equal(sa[i].second, sb[i].second)) return false;
  }
  return true;
}

TEST(ModelsRegistry, SameSeedGivesIdenticalParameters) {
  for (const auto& [name, input] : std::vector<std::pair<std::string, InputSpec>>{
           {"resnet20", kCifarInput},
           {"cnn", {1, 28, 28, 10}},
           {"mlp", {1, 28, 28, 10}},
           {"resnet50", {3, 64, 64, 100}},
           {"inception_v3", {3, 299, 299, 10}}}) {
    torch::manual_seed(42);
    auto a = createModel(name, input);
    torch::manual_seed(42);
    auto b = createModel(name, input);
    torch::manual_seed(43);
    auto c = createModel(name, input);
    EXPECT_TRUE(sameState(*a, *b)) << name;
    EXPECT_FALSE(sameState(*a, *c)) << name;
  }
}

TEST(ModelsRegistry, StableTorchvisionStyleNames) {
  auto has = [](const torch::nn::Module& m, const std::string& key) {
    return m.named_parameters().contains(key) || m.named_buffers().contains(key);
  };
  auto inception = createModel("inception_v3", {3, 299, 299, 10});
  EXPECT_TRUE(has(*inception, "Conv2d_1a_3x3.conv.weight"));
  EXPECT_TRUE(has(*inception, "Mixed_7c.branch3x3dbl_3b.bn.running_var"));
  EXPECT_TRUE(has(*inception, "fc.bias"));
  EXPECT_FALSE(has(*inception, "AuxLogits.fc.weight"));
  auto resnet = createModel("resnet50", {3, 64, 64, 10});
  EXPECT_TRUE(has(*resnet, "layer1.0.downsample.0.weight"));
  EXPECT_TRUE(has(*resnet, "layer4.2.bn3.weight"));
  auto alexnet = createModel("alexnet", {3, 64, 64, 10});
  EXPECT_TRUE(has(*alexnet, "features.10.weight"));
  EXPECT_TRUE(has(*alexnet, "classifier.6.weight"));
  auto cifar = createModel("resnet20", kCifarInput);
  EXPECT_TRUE(has(*cifar, "layer3.2.conv2.weight"));
  EXPECT_FALSE(has(*cifar, "layer2.0.downsample.0.weight"));  // option A has no projection
}

TEST(ModelsRegistry, ArchiveRoundTripRestoresEveryTensor) {
  torch::manual_seed(1);
  auto saved = createModel("resnet20", kCifarInput);
  // Move BN running statistics off their initial values so buffers are covered.
  saved->forward(torch::randn({4, 3, 32, 32}));
  std::stringstream stream;
  torch::save(std::static_pointer_cast<torch::nn::Module>(saved), stream);

  torch::manual_seed(2);
  auto loaded = createModel("resnet20", kCifarInput);
  ASSERT_FALSE(sameState(*saved, *loaded));
  std::shared_ptr<torch::nn::Module> target = loaded;
  torch::load(target, stream);
  EXPECT_TRUE(sameState(*saved, *loaded));
}

}  // namespace
}  // namespace tandem::models
