#pragma once
// One optimizer implementation everywhere: the standalone and all-reduce
// update runs the parameter servers' vectorised kernels (optim/kernels)
// over each parameter's floats, split across torch's intra-op threads,
// instead of torch::optim's chain of tensor ops. The state stays in
// torch::optim's own objects and format, so checkpoints are unchanged, and
// 1 PS + 1 worker computes bit for bit what standalone does.
#include <torch/torch.h>

#include "train/config.hpp"

namespace tandem::train {

// One step of `config`'s optimizer (sgd, adam, adamw or rmsprop) at rate `lr` on every
// parameter of `optimizer` that has a gradient, reading and writing the
// state torch::optim keeps for it. A GPU model takes one multi-tensor
// kernel (multi_tensor_step.hpp) where torch has one; other parameters that
// are not contiguous float32 CPU tensors take torch::optim's own step.
// Not thread-safe; uses torch's intra-op thread pool.
void fusedOptimizerStep(torch::optim::Optimizer& optimizer, const OptimizerConfig& config, double lr);

}  // namespace tandem::train
