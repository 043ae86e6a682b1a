#include "train/mixed_precision.hpp"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include "core/error.hpp"

namespace tandem::train {

nlohmann::json ampSummary(Amp amp, const LossScale& scale) {
  if (amp == Amp::kOff) return nullptr;
  const bool scaled = amp == Amp::kFp16;
  return {{"dtype", enumName(kAmpNames, amp)},
          {"loss_scale", scaled ? nlohmann::json(scale.scale()) : nlohmann::json(nullptr)},
          {"skipped_steps", scale.skipped()}};
}

AutocastScope::AutocastScope(const torch::Device& device, Amp amp) {
  if (amp == Amp::kOff) return;
  active_ = true;
  type_ = device.type();
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  was_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, amp == Amp::kBf16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, was_dtype_);
}

bool unscaleGradients(const std::vector<torch::Tensor>& params, double scale) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return false;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(grads.front().device());
  torch::Tensor found_inf = torch::zeros({1}, options);
  const torch::Tensor inv_scale = torch::full({1}, 1.0 / scale, options);
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  return found_inf.item<float>() != 0.0F;
}

void toChannelsLast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  auto relayout = [](torch::Tensor& t) {
    if (t.defined() && t.dim() == 4) t.set_data(t.contiguous(at::MemoryFormat::ChannelsLast));
  };
  for (auto& p : module.parameters()) relayout(p);
  for (auto& b : module.buffers()) relayout(b);
}

}  // namespace tandem::train
