#include "models/inception_blocks.hpp"

namespace tandem::models::detail {

namespace {

namespace F = torch::nn::functional;

torch::Tensor avgPool3x3(const torch::Tensor& x) {
  return F::avg_pool2d(x, F::AvgPool2dFuncOptions(3).stride(1).padding(1));
}

torch::Tensor maxPool3x3Stride2(const torch::Tensor& x) {
  return F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2));
}

// Shorthands for the factorised kernels.
constexpr std::pair<int64_t, int64_t> k1x7{1, 7}, k7x1{7, 1}, k1x3{1, 3}, k3x1{3, 1};
constexpr std::pair<int64_t, int64_t> p1x7{0, 3}, p7x1{3, 0}, p1x3{0, 1}, p3x1{1, 0};

}  // namespace

BasicConv2dImpl::BasicConv2dImpl(int64_t in, int64_t out, std::pair<int64_t, int64_t> kernel,
                                 int64_t stride, std::pair<int64_t, int64_t> padding) {
  conv_ = register_module(
      "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, {kernel.first, kernel.second})
                                    .stride(stride)
                                    .padding({padding.first, padding.second})
                                    .bias(false)));
  bn_ = register_module("bn", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(out).eps(0.001)));
}

torch::Tensor BasicConv2dImpl::forward(torch::Tensor x) { return torch::relu(bn_(conv_(x))); }

InceptionAImpl::InceptionAImpl(int64_t in, int64_t poolFeatures)
    : branch1x1_(register_module("branch1x1", BasicConv2d(in, 64, 1))),
      branch5x5_1_(register_module("branch5x5_1", BasicConv2d(in, 48, 1))),
      branch5x5_2_(register_module("branch5x5_2", BasicConv2d(48, 64, 5, 1, 2))),
      branch3x3dbl_1_(register_module("branch3x3dbl_1", BasicConv2d(in, 64, 1))),
      branch3x3dbl_2_(register_module("branch3x3dbl_2", BasicConv2d(64, 96, 3, 1, 1))),
      branch3x3dbl_3_(register_module("branch3x3dbl_3", BasicConv2d(96, 96, 3, 1, 1))),
      branchPool_(register_module("branch_pool", BasicConv2d(in, poolFeatures, 1))) {}

torch::Tensor InceptionAImpl::forward(torch::Tensor x) {
  return torch::cat({branch1x1_(x), branch5x5_2_(branch5x5_1_(x)),
                     branch3x3dbl_3_(branch3x3dbl_2_(branch3x3dbl_1_(x))), branchPool_(avgPool3x3(x))},
                    1);
}

InceptionBImpl::InceptionBImpl(int64_t in)
    : branch3x3_(register_module("branch3x3", BasicConv2d(in, 384, 3, 2))),
      branch3x3dbl_1_(register_module("branch3x3dbl_1", BasicConv2d(in, 64, 1))),
      branch3x3dbl_2_(register_module("branch3x3dbl_2", BasicConv2d(64, 96, 3, 1, 1))),
      branch3x3dbl_3_(register_module("branch3x3dbl_3", BasicConv2d(96, 96, 3, 2))) {}

torch::Tensor InceptionBImpl::forward(torch::Tensor x) {
  return torch::cat({branch3x3_(x), branch3x3dbl_3_(branch3x3dbl_2_(branch3x3dbl_1_(x))),
                     maxPool3x3Stride2(x)},
                    1);
}

InceptionCImpl::InceptionCImpl(int64_t in, int64_t c7)
    : branch1x1_(register_module("branch1x1", BasicConv2d(in, 192, 1))),
      branch7x7_1_(register_module("branch7x7_1", BasicConv2d(in, c7, 1))),
      branch7x7_2_(register_module("branch7x7_2", BasicConv2d(c7, c7, k1x7, 1, p1x7))),
      branch7x7_3_(register_module("branch7x7_3", BasicConv2d(c7, 192, k7x1, 1, p7x1))),
      branch7x7dbl_1_(register_module("branch7x7dbl_1", BasicConv2d(in, c7, 1))),
      branch7x7dbl_2_(register_module("branch7x7dbl_2", BasicConv2d(c7, c7, k7x1, 1, p7x1))),
      branch7x7dbl_3_(register_module("branch7x7dbl_3", BasicConv2d(c7, c7, k1x7, 1, p1x7))),
      branch7x7dbl_4_(register_module("branch7x7dbl_4", BasicConv2d(c7, c7, k7x1, 1, p7x1))),
      branch7x7dbl_5_(register_module("branch7x7dbl_5", BasicConv2d(c7, 192, k1x7, 1, p1x7))),
      branchPool_(register_module("branch_pool", BasicConv2d(in, 192, 1))) {}

torch::Tensor InceptionCImpl::forward(torch::Tensor x) {
  auto b7 = branch7x7_3_(branch7x7_2_(branch7x7_1_(x)));
  auto b7dbl = branch7x7dbl_1_(x);
  b7dbl = branch7x7dbl_3_(branch7x7dbl_2_(b7dbl));
  b7dbl = branch7x7dbl_5_(branch7x7dbl_4_(b7dbl));
  return torch::cat({branch1x1_(x), b7, b7dbl, branchPool_(avgPool3x3(x))}, 1);
}

InceptionDImpl::InceptionDImpl(int64_t in)
    : branch3x3_1_(register_module("branch3x3_1", BasicConv2d(in, 192, 1))),
      branch3x3_2_(register_module("branch3x3_2", BasicConv2d(192, 320, 3, 2))),
      branch7x7x3_1_(register_module("branch7x7x3_1", BasicConv2d(in, 192, 1))),
      branch7x7x3_2_(register_module("branch7x7x3_2", BasicConv2d(192, 192, k1x7, 1, p1x7))),
      branch7x7x3_3_(register_module("branch7x7x3_3", BasicConv2d(192, 192, k7x1, 1, p7x1))),
      branch7x7x3_4_(register_module("branch7x7x3_4", BasicConv2d(192, 192, 3, 2))) {}

torch::Tensor InceptionDImpl::forward(torch::Tensor x) {
  auto b3 = branch3x3_2_(branch3x3_1_(x));
  auto b7 = branch7x7x3_4_(branch7x7x3_3_(branch7x7x3_2_(branch7x7x3_1_(x))));
  return torch::cat({b3, b7, maxPool3x3Stride2(x)}, 1);
}

InceptionEImpl::InceptionEImpl(int64_t in)
    : branch1x1_(register_module("branch1x1", BasicConv2d(in, 320, 1))),
      branch3x3_1_(register_module("branch3x3_1", BasicConv2d(in, 384, 1))),
      branch3x3_2a_(register_module("branch3x3_2a", BasicConv2d(384, 384, k1x3, 1, p1x3))),
      branch3x3_2b_(register_module("branch3x3_2b", BasicConv2d(384, 384, k3x1, 1, p3x1))),
      branch3x3dbl_1_(register_module("branch3x3dbl_1", BasicConv2d(in, 448, 1))),
      branch3x3dbl_2_(register_module("branch3x3dbl_2", BasicConv2d(448, 384, 3, 1, 1))),
      branch3x3dbl_3a_(register_module("branch3x3dbl_3a", BasicConv2d(384, 384, k1x3, 1, p1x3))),
      branch3x3dbl_3b_(register_module("branch3x3dbl_3b", BasicConv2d(384, 384, k3x1, 1, p3x1))),
      branchPool_(register_module("branch_pool", BasicConv2d(in, 192, 1))) {}

torch::Tensor InceptionEImpl::forward(torch::Tensor x) {
  auto b3 = branch3x3_1_(x);
  b3 = torch::cat({branch3x3_2a_(b3), branch3x3_2b_(b3)}, 1);
  auto b3dbl = branch3x3dbl_2_(branch3x3dbl_1_(x));
  b3dbl = torch::cat({branch3x3dbl_3a_(b3dbl), branch3x3dbl_3b_(b3dbl)}, 1);
  return torch::cat({branch1x1_(x), b3, b3dbl, branchPool_(avgPool3x3(x))}, 1);
}

}  // namespace tandem::models::detail
