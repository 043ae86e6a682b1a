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
// for a device this process cannot have.
TrainingDevice chooseTrainingDevice(const std::string& request, const cluster::LocalRank& local);

// Puts the optimizer's state tensors on `device` (a resumed checkpoint's
// state is read on CPU). Parameters are moved by Module::to and keep their
// identity, which the optimizer's state is keyed by.
void moveOptimizerState(torch::optim::Optimizer& optimizer, const torch::Device& device);

}  // namespace tandem::train
