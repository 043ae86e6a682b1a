#pragma once
// Mixed precision (--amp) and channels-last memory (--channels-last): the
// forward runs under autocast in bfloat16 or float16 while parameters,
// gradients and optimizer state stay float32; float16 adds a dynamic loss
// scale (loss_scale.hpp).
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "train/config.hpp"
#include "train/loss_scale.hpp"

namespace tandem::train {

// summary.json's "amp": null when off; else the dtype, and for fp16 the
// final loss scale and the steps it skipped.
nlohmann::json ampSummary(Amp amp, const LossScale& scale);

// Autocast for `device`'s type while it lives; nothing when `amp` is off.
// Restores the previous autocast state on exit, and clears autocast's
// cache of cast weights when the outermost scope ends.
class AutocastScope {
 public:
  AutocastScope(const torch::Device& device, Amp amp);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

// Divides every defined gradient of `params` by `scale` in place (one
// multi-tensor pass) and says whether any of them holds an inf or NaN.
// One read back to the host.
bool unscaleGradients(const std::vector<torch::Tensor>& params, double scale);

// Puts every 4-d parameter and buffer of `module` in channels-last layout,
// in place (the optimizer keeps its references).
void toChannelsLast(torch::nn::Module& module);

}  // namespace tandem::train
