#pragma once
// The mixed blocks of Inception v3 (Szegedy et al. 2016), laid out and named
// as in torchvision so parameter names match its state_dict keys.
#include <torch/torch.h>

#include <cstdint>
#include <utility>

namespace tandem::models::detail {

// Conv without bias, then BatchNorm (eps 0.001), then ReLU.
class BasicConv2dImpl : public torch::nn::Module {
 public:
  BasicConv2dImpl(int64_t in, int64_t out, std::pair<int64_t, int64_t> kernel, int64_t stride = 1,
                  std::pair<int64_t, int64_t> padding = {0, 0});
  BasicConv2dImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0)
      : BasicConv2dImpl(in, out, {kernel, kernel}, stride, {padding, padding}) {}
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d bn_{nullptr};
};
TORCH_MODULE(BasicConv2d);

// 35x35 stage: 1x1, 5x5, double 3x3 and pooled branches.
class InceptionAImpl : public torch::nn::Module {
 public:
  InceptionAImpl(int64_t in, int64_t poolFeatures);
  torch::Tensor forward(torch::Tensor x);
  static int64_t outChannels(int64_t poolFeatures) { return 64 + 64 + 96 + poolFeatures; }

 private:
  BasicConv2d branch1x1_, branch5x5_1_, branch5x5_2_;
  BasicConv2d branch3x3dbl_1_, branch3x3dbl_2_, branch3x3dbl_3_, branchPool_;
};
TORCH_MODULE(InceptionA);

// Grid reduction 35x35 -> 17x17.
class InceptionBImpl : public torch::nn::Module {
 public:
  explicit InceptionBImpl(int64_t in);
  torch::Tensor forward(torch::Tensor x);
  static int64_t outChannels(int64_t in) { return 384 + 96 + in; }

 private:
  BasicConv2d branch3x3_, branch3x3dbl_1_, branch3x3dbl_2_, branch3x3dbl_3_;
};
TORCH_MODULE(InceptionB);

// 17x17 stage with factorised 7x7 convolutions of width c7.
class InceptionCImpl : public torch::nn::Module {
 public:
  InceptionCImpl(int64_t in, int64_t c7);
  torch::Tensor forward(torch::Tensor x);
  static constexpr int64_t kOutChannels = 4 * 192;

 private:
  BasicConv2d branch1x1_, branch7x7_1_, branch7x7_2_, branch7x7_3_;
  BasicConv2d branch7x7dbl_1_, branch7x7dbl_2_, branch7x7dbl_3_, branch7x7dbl_4_, branch7x7dbl_5_;
  BasicConv2d branchPool_;
};
TORCH_MODULE(InceptionC);

// Grid reduction 17x17 -> 8x8.
class InceptionDImpl : public torch::nn::Module {
 public:
  explicit InceptionDImpl(int64_t in);
  torch::Tensor forward(torch::Tensor x);
  static int64_t outChannels(int64_t in) { return 320 + 192 + in; }

 private:
  BasicConv2d branch3x3_1_, branch3x3_2_;
  BasicConv2d branch7x7x3_1_, branch7x7x3_2_, branch7x7x3_3_, branch7x7x3_4_;
};
TORCH_MODULE(InceptionD);

// 8x8 stage with expanded (1x3 | 3x1) filter banks.
class InceptionEImpl : public torch::nn::Module {
 public:
  explicit InceptionEImpl(int64_t in);
  torch::Tensor forward(torch::Tensor x);
  static constexpr int64_t kOutChannels = 320 + 768 + 768 + 192;

 private:
  BasicConv2d branch1x1_, branch3x3_1_, branch3x3_2a_, branch3x3_2b_;
  BasicConv2d branch3x3dbl_1_, branch3x3dbl_2_, branch3x3dbl_3a_, branch3x3dbl_3b_;
  BasicConv2d branchPool_;
};
TORCH_MODULE(InceptionE);

}  // namespace tandem::models::detail
