// Inception v3 as in torchvision, without the auxiliary classifier: the aux
// head only feeds an extra training loss, and leaving it out keeps forward a
// single tensor -> tensor call like every other model here.
#include "models/builders.hpp"
#include "models/inception_blocks.hpp"
#include "models/init.hpp"
#include "models/shape_check.hpp"

namespace tandem::models::detail {

namespace {

class InceptionV3 final : public Model {
 public:
  explicit InceptionV3(const InputSpec& input) {
    // Registration order is torchvision's, so named_parameters() lists the
    // same keys in the same order (minus AuxLogits).
    trunk_->push_back("Conv2d_1a_3x3", BasicConv2d(input.channels, 32, 3, 2));
    trunk_->push_back("Conv2d_2a_3x3", BasicConv2d(32, 32, 3));
    trunk_->push_back("Conv2d_2b_3x3", BasicConv2d(32, 64, 3, 1, 1));
    trunk_->push_back("maxpool1", torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2)));
    trunk_->push_back("Conv2d_3b_1x1", BasicConv2d(64, 80, 1));
    trunk_->push_back("Conv2d_4a_3x3", BasicConv2d(80, 192, 3));
    trunk_->push_back("maxpool2", torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2)));
    trunk_->push_back("Mixed_5b", InceptionA(192, 32));
    trunk_->push_back("Mixed_5c", InceptionA(InceptionAImpl::outChannels(32), 64));
    trunk_->push_back("Mixed_5d", InceptionA(InceptionAImpl::outChannels(64), 64));
    trunk_->push_back("Mixed_6a", InceptionB(InceptionAImpl::outChannels(64)));
    const int64_t c6 = InceptionBImpl::outChannels(InceptionAImpl::outChannels(64));
    trunk_->push_back("Mixed_6b", InceptionC(c6, 128));
    trunk_->push_back("Mixed_6c", InceptionC(InceptionCImpl::kOutChannels, 160));
    trunk_->push_back("Mixed_6d", InceptionC(InceptionCImpl::kOutChannels, 160));
    trunk_->push_back("Mixed_6e", InceptionC(InceptionCImpl::kOutChannels, 192));
    trunk_->push_back("Mixed_7a", InceptionD(InceptionCImpl::kOutChannels));
    const int64_t c7 = InceptionDImpl::outChannels(InceptionCImpl::kOutChannels);
    trunk_->push_back("Mixed_7b", InceptionE(c7));
    trunk_->push_back("Mixed_7c", InceptionE(InceptionEImpl::kOutChannels));
    // Flattened into this module rather than nested under "trunk" so that the
    // names are exactly torchvision's (Conv2d_1a_3x3.conv.weight, ...);
    // trunk_ itself stays unregistered and only fixes the call order.
    for (const auto& item : trunk_->named_children()) register_module(item.key(), item.value());
    dropout_ = register_module("dropout", torch::nn::Dropout(0.5));
    fc_ = register_module("fc", torch::nn::Linear(InceptionEImpl::kOutChannels, input.num_classes));
    initTruncatedNormal(*this, 0.1);
  }

  bool gatesStages() const override { return true; }


  torch::Tensor forward(torch::Tensor x) override {
    x = forwardStages(trunk_, x).mean({2, 3});
    enterStage(*fc_);
    return fc_(dropout_(x));
  }

 private:
  torch::nn::Sequential trunk_;
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

int64_t inceptionFinalSide(int64_t side) {
  side = windowOut(windowOut(side, 3, 2), 3);  // Conv2d_1a, Conv2d_2a (2b keeps the side)
  side = windowOut(side, 3, 2);                 // maxpool1
  side = windowOut(windowOut(side, 3), 3, 2);   // Conv2d_4a, maxpool2
  side = windowOut(side, 3, 2);                 // Mixed_6a
  return windowOut(side, 3, 2);                 // Mixed_7a
}

}  // namespace

ModelPtr makeInceptionV3(const InputSpec& input) {
  checkInput("inception_v3", input, inceptionFinalSide);
  return std::make_shared<InceptionV3>(input);
}

}  // namespace tandem::models::detail
