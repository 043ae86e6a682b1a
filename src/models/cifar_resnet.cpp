// CIFAR ResNets of He et al. 2016 (section 4.2): depth 6n+2, three stages of n
// basic blocks with 16/32/64 channels. Shortcuts are option A (subsample and
// zero-pad channels) so they add no parameters and counts match the paper.
#include "core/error.hpp"
#include "models/builders.hpp"
#include "models/init.hpp"
#include "models/shape_check.hpp"

namespace tandem::models::detail {

namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride)
      : conv1_(register_module("conv1", conv3x3(in, planes, stride))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", conv3x3(planes, planes, 1))),
        bn2_(register_module("bn2", torch::nn::BatchNorm2d(planes))),
        stride_(stride),
        padLow_((planes - in) / 2),
        padHigh_(planes - in - padLow_) {}

  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1_(conv1_(x)));
    out = bn2_(conv2_(out));
    return torch::relu(out + shortcut(x));
  }

 private:
  // A strided slice matches the conv's output side (ceil(side / stride)) for
  // odd sides too, so 28x28 inputs line up at every stage.
  torch::Tensor shortcut(const torch::Tensor& x) const {
    auto y = x;
    if (stride_ != 1) {
      y = y.slice(2, 0, c10::nullopt, stride_).slice(3, 0, c10::nullopt, stride_);
    }
    if (padLow_ != 0 || padHigh_ != 0) {
      y = F::pad(y, F::PadFuncOptions({0, 0, 0, 0, padLow_, padHigh_}));
    }
    return y;
  }

  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Conv2d conv2_;
  torch::nn::BatchNorm2d bn2_;
  int64_t stride_;
  int64_t padLow_;
  int64_t padHigh_;
};
TORCH_MODULE(BasicBlock);

class CifarResNet final : public Model {
 public:
  CifarResNet(int64_t blocksPerStage, const InputSpec& input)
      : conv1_(register_module("conv1", conv3x3(input.channels, 16, 1))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(16))),
        layer1_(register_module("layer1", makeStage(16, 16, blocksPerStage, 1))),
        layer2_(register_module("layer2", makeStage(16, 32, blocksPerStage, 2))),
        layer3_(register_module("layer3", makeStage(32, 64, blocksPerStage, 2))),
        fc_(register_module("fc", torch::nn::Linear(64, input.num_classes))) {
    initConvKaiming(*this);
  }

  bool gatesStages() const override { return true; }


  torch::Tensor forward(torch::Tensor x) override {
    enterStage(*conv1_);
    enterStage(*bn1_);
    x = torch::relu(bn1_(conv1_(x)));
    for (auto* stage : {&layer1_, &layer2_, &layer3_}) x = forwardStages(*stage, x);  // block by block
    enterStage(*fc_);
    return fc_(x.mean({2, 3}));
  }

 private:
  static torch::nn::Sequential makeStage(int64_t in, int64_t planes, int64_t blocks, int64_t stride) {
    torch::nn::Sequential stage;
    for (int64_t i = 0; i < blocks; ++i) {
      stage->push_back(BasicBlock(i == 0 ? in : planes, planes, i == 0 ? stride : 1));
    }
    return stage;
  }

  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Sequential layer1_;
  torch::nn::Sequential layer2_;
  torch::nn::Sequential layer3_;
  torch::nn::Linear fc_;
};

}  // namespace

ModelPtr makeCifarResNet(const std::string& name, int64_t depth, const InputSpec& input) {
  if (depth < 8 || (depth - 2) % 6 != 0) {
    throw InputError(fmt::format("model '{}': CIFAR ResNet depth must be 6n+2, got {}", name, depth));
  }
  // Two stride-2 stages; a side of 1 stays 1, so any positive input works.
  checkInput(name, input, [](int64_t side) { return windowOut(windowOut(side, 3, 2, 1), 3, 2, 1); });
  return std::make_shared<CifarResNet>((depth - 2) / 6, input);
}

}  // namespace tandem::models::detail
