// AlexNet in torchvision's single-tower variant (64-192-384-256-256 features,
// adaptive 6x6 pool), the classic fully-connected-heavy workload: 94% of its
// 61.1M parameters sit in the classifier, so it stresses communication.
#include "models/builders.hpp"
#include "models/shape_check.hpp"

namespace tandem::models::detail {

namespace {

using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::MaxPool2d;
using torch::nn::MaxPool2dOptions;
using torch::nn::ReLU;

class AlexNet final : public Model {
 public:
  explicit AlexNet(const InputSpec& input) {
    // Layer order and indices follow torchvision so that parameter names
    // (features.0.weight, classifier.1.weight, ...) read the same.
    features_ = register_module(
        "features",
        torch::nn::Sequential(Conv2d(Conv2dOptions(input.channels, 64, 11).stride(4).padding(2)),
                              ReLU(), MaxPool2d(MaxPool2dOptions(3).stride(2)),
                              Conv2d(Conv2dOptions(64, 192, 5).padding(2)), ReLU(),
                              MaxPool2d(MaxPool2dOptions(3).stride(2)),
                              Conv2d(Conv2dOptions(192, 384, 3).padding(1)), ReLU(),
                              Conv2d(Conv2dOptions(384, 256, 3).padding(1)), ReLU(),
                              Conv2d(Conv2dOptions(256, 256, 3).padding(1)), ReLU(),
                              MaxPool2d(MaxPool2dOptions(3).stride(2))));
    avgpool_ = register_module("avgpool", torch::nn::AdaptiveAvgPool2d(6));
    classifier_ = register_module(
        "classifier",
        torch::nn::Sequential(torch::nn::Dropout(0.5), torch::nn::Linear(256 * 6 * 6, 4096), ReLU(),
                              torch::nn::Dropout(0.5), torch::nn::Linear(4096, 4096), ReLU(),
                              torch::nn::Linear(4096, input.num_classes)));
  }

  bool gatesStages() const override { return true; }


  torch::Tensor forward(torch::Tensor x) override {
    x = avgpool_(forwardStages(features_, x));
    return forwardStages(classifier_, x.flatten(1));
  }

 private:
  torch::nn::Sequential features_{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool_{nullptr};
  torch::nn::Sequential classifier_{nullptr};
};

int64_t alexnetFinalSide(int64_t side) {
  side = windowOut(windowOut(side, 11, 4, 2), 3, 2);
  side = windowOut(windowOut(side, 5, 1, 2), 3, 2);
  return windowOut(side, 3, 2);  // the 3x3 convs in between keep the side
}

}  // namespace

ModelPtr makeAlexNet(const InputSpec& input) {
  checkInput("alexnet", input, alexnetFinalSide);
  return std::make_shared<AlexNet>(input);
}

}  // namespace tandem::models::detail
