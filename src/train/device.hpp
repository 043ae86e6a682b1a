#pragma once
// The device a worker trains on (cluster/device_placement.hpp decides; this
// counts the GPUs) and moving a run's state there.
#include <torch/torch.h>

#include <string>

#include "cluster/device_placement.hpp"

namespace tandem::train {

struct TrainingDevice {
  torch::Device device = torch::kCPU;
  std::string reason;  // why this device
};

// Resolves --device for a worker of local rank `local`, loading LibTorch's
// CUDA half first where a driver is (cuda_library.hpp). Throws InputError
// for a device this process cannot have (naming `env`'s
// CUDA_VISIBLE_DEVICES where it is set).
TrainingDevice chooseTrainingDevice(const std::string& request, const cluster::LocalRank& local,
                                    const Environment& env, bool allow_shared = false);

// Puts the optimizer's state tensors on `device` (a resumed checkpoint's
// state is read on CPU). Parameters are moved by Module::to and keep their
// identity, which the optimizer's state is keyed by.
void moveOptimizerState(torch::optim::Optimizer& optimizer, const torch::Device& device);

// Makes every later kernel of this process deterministic, as
// torch.use_deterministic_algorithms(True) with cuDNN's benchmark off and
// CUBLAS_WORKSPACE_CONFIG=:4096:8 (unless the caller set it): an operation
// with no deterministic kernel then throws, naming itself. Process-wide:
// LibTorch keeps these settings globally.
void requireDeterministicKernels();

}  // namespace tandem::train
