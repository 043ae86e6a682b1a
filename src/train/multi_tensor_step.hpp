#pragma once
// The optimizer step for parameters on a GPU: one fused multi-tensor
// kernel for the whole model (torch's _fused_sgd_, _fused_adam_,
// _fused_adamw_, as torch.optim's fused=True runs them), instead of
// torch::optim's several launches per parameter. The state stays in
// torch::optim's own objects, so checkpoints and a later torch step read it.
#include <torch/torch.h>

#include "train/config.hpp"

namespace tandem::train {

// One step at rate `lr` of every parameter of `optimizer` that has a
// gradient. Returns false, having changed nothing, where no fused kernel
// applies (rmsprop; parameters on several devices; SGD momentum buffers
// that exist for some parameters but not others): the caller then runs
// torch::optim's step. Runs on any device whose LibTorch has the kernels
// (CUDA; the CPU too, where the tests compare it with the CPU kernels).
bool multiTensorStep(torch::optim::Optimizer& optimizer, const OptimizerConfig& config, double lr);

}  // namespace tandem::train
