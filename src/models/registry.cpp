#include "models/registry.hpp"

#include <algorithm>
#include <functional>

#include <fmt/ranges.h>

#include "core/error.hpp"
#include "models/builders.hpp"
#include "models/scripted_model.hpp"

namespace tandem::models {

namespace {

using Builder = std::function<ModelPtr(const InputSpec&, const ModelOptions&)>;

struct Entry {
  ModelInfo info;
  Builder build;
};

constexpr InputSpec kCifar{3, 32, 32, 10};
constexpr InputSpec kImageNet{3, 224, 224, 1000};

Builder cifarResNet(const std::string& name, int64_t depth) {
  return [name, depth](const InputSpec& in, const ModelOptions&) {
    return detail::makeCifarResNet(name, depth, in);
  };
}

Builder imageNetResNet(const std::string& name, std::array<int64_t, 4> blocks) {
  return [name, blocks](const InputSpec& in, const ModelOptions&) {
    return detail::makeImageNetResNet(name, blocks, in);
  };
}

std::vector<Entry> makeEntries() {
  std::vector<Entry> entries{
      {{"alexnet", "AlexNet (torchvision variant), 61.1M parameters", kImageNet},
       [](const InputSpec& in, const ModelOptions&) { return detail::makeAlexNet(in); }},
      {{"cnn", "small 2-conv CNN with BatchNorm for Fashion-MNIST, 0.1M parameters", {1, 28, 28, 10}},
       [](const InputSpec& in, const ModelOptions&) { return detail::makeCnn(in, true); }},
      {{"cnn_nobn", "the small CNN without BatchNorm (split-batch exact, for equivalence checks)", {1, 28, 28, 10}},
       [](const InputSpec& in, const ModelOptions&) { return detail::makeCnn(in, false); }},
      {{"inception_v3", "Inception v3 (torchvision, no aux head), 23.8M parameters", {3, 299, 299, 1000}},
       [](const InputSpec& in, const ModelOptions&) { return detail::makeInceptionV3(in); }},
      {{"mlp", "multi-layer perceptron over flattened input, hidden widths 4096,4096 by default",
        {256, 1, 1, 256}},
       detail::makeMlp},
      {{"resnet20", "CIFAR ResNet-20 (He et al. 2016, option A shortcuts), 0.27M parameters", kCifar},
       cifarResNet("resnet20", 20)},
      {{"resnet32", "CIFAR ResNet-32, 0.46M parameters", kCifar}, cifarResNet("resnet32", 32)},
      {{"resnet44", "CIFAR ResNet-44, 0.66M parameters", kCifar}, cifarResNet("resnet44", 44)},
      {{"resnet56", "CIFAR ResNet-56, 0.85M parameters", kCifar}, cifarResNet("resnet56", 56)},
      {{"resnet110", "CIFAR ResNet-110, 1.7M parameters", kCifar}, cifarResNet("resnet110", 110)},
      {{"resnet50", "ImageNet ResNet-50 (torchvision), 25.6M parameters", kImageNet},
       imageNetResNet("resnet50", {3, 4, 6, 3})},
      {{"resnet152", "ImageNet ResNet-152 (torchvision), 60.2M parameters", kImageNet},
       imageNetResNet("resnet152", {3, 8, 36, 3})},
  };
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.info.name < b.info.name; });
  return entries;
}

// Built once on first use (a thread-safe static) and immutable afterwards.
const std::vector<Entry>& entries() {
  static const std::vector<Entry> kEntries = makeEntries();
  return kEntries;
}

}  // namespace

void requireKnownModel(const std::string& name) {
  if (isModelFile(name)) return requireModelFile(name);
  const auto& all = entries();
  if (std::none_of(all.begin(), all.end(), [&](const Entry& e) { return e.info.name == name; })) {
    std::vector<std::string> names;
    for (const auto& e : all) names.push_back(e.info.name);
    throw InputError(fmt::format("unknown model '{}'; known models: {} (or a TorchScript file: --model path/to/model.pt)",
                                 name, fmt::join(names, ", ")));
  }
}

ModelPtr createModel(const std::string& name, const InputSpec& input, const ModelOptions& options) {
  if (isModelFile(name)) return loadScriptedModel(name, input);
  requireKnownModel(name);
  const auto& all = entries();
  return std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.info.name == name; })
      ->build(input, options);
}

const std::vector<ModelInfo>& listModels() {
  static const std::vector<ModelInfo> kInfos = [] {
    std::vector<ModelInfo> infos;
    for (const auto& e : entries()) infos.push_back(e.info);
    return infos;
  }();
  return kInfos;
}

int64_t countParameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (p.requires_grad()) total += p.numel();
  }
  return total;
}

}  // namespace tandem::models
