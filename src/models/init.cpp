#include "models/init.hpp"

namespace tandem::models::detail {

namespace {

void resetBatchNorm(torch::nn::BatchNorm2dImpl& bn) {
  if (bn.weight.defined()) torch::nn::init::ones_(bn.weight);
  if (bn.bias.defined()) torch::nn::init::zeros_(bn.bias);
}

}  // namespace

void initConvKaiming(torch::nn::Module& module) {
  torch::NoGradGuard noGrad;
  // include_self=false: the module may still be under construction, so it
  // cannot be reached through shared_from_this.
  for (const auto& child : module.modules(/*include_self=*/false)) {
    if (auto* conv = child->as<torch::nn::Conv2dImpl>()) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      if (conv->bias.defined()) torch::nn::init::zeros_(conv->bias);
    } else if (auto* bn = child->as<torch::nn::BatchNorm2dImpl>()) {
      resetBatchNorm(*bn);
    }
  }
}

void initTruncatedNormal(torch::nn::Module& module, double stddev) {
  torch::NoGradGuard noGrad;
  // LibTorch 1.13 has no trunc_normal_; clamping is equivalent here because
  // the bounds sit 20 standard deviations out and are never reached in
  // practice, and it consumes the generator exactly like a plain normal_.
  auto draw = [stddev](torch::Tensor& weight) { weight.normal_(0.0, stddev).clamp_(-2.0, 2.0); };
  for (const auto& child : module.modules(/*include_self=*/false)) {
    if (auto* conv = child->as<torch::nn::Conv2dImpl>()) {
      draw(conv->weight);
    } else if (auto* linear = child->as<torch::nn::LinearImpl>()) {
      draw(linear->weight);
    } else if (auto* bn = child->as<torch::nn::BatchNorm2dImpl>()) {
      resetBatchNorm(*bn);
    }
  }
}

}  // namespace tandem::models::detail
