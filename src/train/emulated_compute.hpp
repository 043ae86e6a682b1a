#pragma once
// Emulated GPU compute (--emulate-compute PROFILE): forward and backward
// become timed waits taken from a profile of a real GPU, while everything
// else stays real: the model's parameter shapes, its buckets and chunks, and
// every byte on the wire. Backward hands each parameter a fixed, deterministic
// gradient through autograd, in the order the model's real backward would,
// after a wait that follows the parameter's share of the model's FLOPs, so
// gradient hooks (and the exchange they start) overlap as on a GPU. Almost
// no CPU is spent, so many emulated GPUs fit on a few cores.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/registry.hpp"
#include "obs/timeline.hpp"

namespace tandem::train {

struct ComputeProfile {
  std::string path;
  std::string model;   // the model it was measured on
  std::string device;  // e.g. "NVIDIA Tesla K80"
  int64_t batch_size = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  std::string source;  // where the figures come from
};

// Reads a profile: JSON with model, device, batch_size, forward_ms,
// backward_ms and source. Throws InputError naming the file and the field.
ComputeProfile loadComputeProfile(const std::string& path);

class EmulatedCompute {
 public:
  // Probes `model` once with a real forward of two samples shaped like
  // `sample` ([C, H, W] or [features]) to find each parameter's FLOPs and the
  // order backward reaches it.
  EmulatedCompute(models::Model& model, ComputeProfile profile, torch::IntArrayRef sample_shape);
  ~EmulatedCompute();

  // Called before a layer's forward with the number of parameters (in
  // registration order) that must hold their values by then.
  using ParameterGate = std::function<void(size_t count)>;

  // Waits out the profile's forward time, layer by layer in forward order
  // (each its share of the FLOPs), and returns a loss of 0 whose backward is
  // the emulated one. `gate`, when set, is asked before each layer that
  // needs a parameter not yet asked for, so a layer waits for its weights.
  // With a `timeline`, the forward and each layer's backward are spans on it.
  torch::Tensor forward(const ParameterGate& gate = {}, obs::Timeline* timeline = nullptr);

  const ComputeProfile& profile() const;
  // Each trainable parameter's share of the backward time, in registration
  // order (sums to 1), and the order backward delivers them.
  const std::vector<double>& backwardShares() const;
  const std::vector<size_t>& backwardOrder() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::train
