// ImageNet ResNets with bottleneck blocks, as in torchvision (v1.5: the stride
// sits on the 3x3 conv; projection shortcuts where the shape changes).
#include <fmt/format.h>

#include "models/builders.hpp"
#include "models/init.hpp"
#include "models/shape_check.hpp"

namespace tandem::models::detail {

namespace {

using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;

constexpr int64_t kExpansion = 4;

Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0) {
  return Conv2d(Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride)
      : conv1_(register_module("conv1", conv(in, planes, 1))),
        bn1_(register_module("bn1", BatchNorm2d(planes))),
        conv2_(register_module("conv2", conv(planes, planes, 3, stride, 1))),
        bn2_(register_module("bn2", BatchNorm2d(planes))),
        conv3_(register_module("conv3", conv(planes, planes * kExpansion, 1))),
        bn3_(register_module("bn3", BatchNorm2d(planes * kExpansion))) {
    if (stride != 1 || in != planes * kExpansion) {
      downsample_ = register_module(
          "downsample", torch::nn::Sequential(conv(in, planes * kExpansion, 1, stride),
                                              BatchNorm2d(planes * kExpansion)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1_(conv1_(x)));
    out = torch::relu(bn2_(conv2_(out)));
    out = bn3_(conv3_(out));
    auto identity = downsample_.is_empty() ? x : downsample_->forward(x);
    return torch::relu(out + identity);
  }

 private:
  Conv2d conv1_;
  BatchNorm2d bn1_;
  Conv2d conv2_;
  BatchNorm2d bn2_;
  Conv2d conv3_;
  BatchNorm2d bn3_;
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

class ImageNetResNet final : public Model {
 public:
  ImageNetResNet(const std::array<int64_t, 4>& blocks, const InputSpec& input)
      : conv1_(register_module("conv1", conv(input.channels, 64, 7, 2, 3))),
        bn1_(register_module("bn1", BatchNorm2d(64))),
        maxpool_(register_module("maxpool",
                                 torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1)))) {
    const std::array<int64_t, 4> planes{64, 128, 256, 512};
    int64_t in = 64;
    for (size_t stage = 0; stage < blocks.size(); ++stage) {
      torch::nn::Sequential layer;
      for (int64_t i = 0; i < blocks[stage]; ++i) {
        const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
        layer->push_back(Bottleneck(in, planes[stage], stride));
        in = planes[stage] * kExpansion;
      }
      layers_[stage] = register_module(fmt::format("layer{}", stage + 1), layer);
    }
    fc_ = register_module("fc", torch::nn::Linear(in, input.num_classes));
    initConvKaiming(*this);
  }

  bool gatesStages() const override { return true; }


  torch::Tensor forward(torch::Tensor x) override {
    enterStage(*conv1_);
    enterStage(*bn1_);
    x = maxpool_(torch::relu(bn1_(conv1_(x))));
    for (auto& layer : layers_) x = forwardStages(layer, x);  // block by block
    enterStage(*fc_);
    return fc_(x.mean({2, 3}));
  }

 private:
  Conv2d conv1_;
  BatchNorm2d bn1_;
  torch::nn::MaxPool2d maxpool_;
  std::array<torch::nn::Sequential, 4> layers_{nullptr, nullptr, nullptr, nullptr};
  torch::nn::Linear fc_{nullptr};
};

}  // namespace

ModelPtr makeImageNetResNet(const std::string& name, const std::array<int64_t, 4>& blocks,
                            const InputSpec& input) {
  // Every window is padded to fit a side of 1, so any positive input works.
  checkInput(name, input, [](int64_t side) {
    side = windowOut(windowOut(side, 7, 2, 3), 3, 2, 1);
    for (int stage = 1; stage < 4; ++stage) side = windowOut(side, 3, 2, 1);
    return side;
  });
  return std::make_shared<ImageNetResNet>(blocks, input);
}

}  // namespace tandem::models::detail
