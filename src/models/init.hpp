#pragma once
// Weight initialisation shared by the convolutional models. Every draw comes
// from torch's global generator in construction order, so torch::manual_seed
// before createModel reproduces the parameters exactly (workers rely on this
// to start from the same point without a broadcast).
#include <torch/torch.h>

namespace tandem::models::detail {

// torchvision's ResNet scheme: kaiming normal (fan_out, ReLU) for every
// Conv2d below `module`, zero conv bias, BatchNorm weight 1 and bias 0.
// Linear layers keep torch's default init. Safe to call from a constructor.
void initConvKaiming(torch::nn::Module& module);

// torchvision's Inception v3 scheme: normal(0, stddev) truncated to [-2, 2]
// for every Conv2d and Linear weight, BatchNorm weight 1 and bias 0.
void initTruncatedNormal(torch::nn::Module& module, double stddev);

}  // namespace tandem::models::detail
