#include "train/multi_tensor_step.hpp"

#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>

#include <optional>
#include <vector>

#include "train/optimizer_state.hpp"

namespace tandem::train {

bool multiTensorStep(torch::optim::Optimizer& optimizer, const OptimizerConfig& config, double lr) {
  const std::string& name = config.name;
  if (name != "sgd" && name != "adam" && name != "adamw") return false;
  const bool sgd = name == "sgd";
  const bool keeps_slots = optim::slotCount(config) > 0;
  std::vector<torch::Tensor> params, grads, slots0, slots1;
  std::vector<std::optional<KernelState>> states;
  std::vector<float> counts;  // Adam: each parameter's updates, this one included
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!params.empty() && p.device() != params.front().device()) return false;
      params.push_back(p);
      grads.push_back(p.grad());
      states.push_back(readKernelState(optimizer, p, config));
    }
  }
  if (params.empty()) return true;
  // SGD's first step fills the momentum buffers from the gradients, for
  // every parameter of the call alike.
  size_t fresh = 0;
  for (const auto& s : states) fresh += s.has_value() ? 0 : 1;
  if (sgd && keeps_slots && fresh != 0 && fresh != states.size()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    KernelState state = states[i].value_or(KernelState{});
    const int64_t before = states[i] ? state.updates : 0;
    if (!states[i]) {
      for (int k = 0; k < optim::slotCount(config); ++k) {
        state.slots.push_back(sgd ? torch::empty_like(params[i]) : torch::zeros_like(params[i]));
      }
    }
    if (!sgd) {
      state.updates = before + 1;
      counts.push_back(static_cast<float>(state.updates));
    }
    if (keeps_slots) slots0.push_back(state.slots[0]);
    if (!sgd) slots1.push_back(state.slots[1]);
    // SGD's existing state holds the buffers the kernel updates in place:
    // nothing to store again.
    if (!sgd || !states[i]) writeKernelState(optimizer, params[i], config, state);
  }
  torch::NoGradGuard no_grad;
  if (sgd) {
    at::_fused_sgd_(params, grads, keeps_slots ? at::TensorList(slots0) : at::TensorList(), config.weight_decay,
                    config.momentum, lr, /*dampening=*/0.0, config.nesterov, /*maximize=*/false,
                    /*is_first_step=*/fresh != 0);
    return true;
  }
  // The kernels take each parameter's step count, this update included (as
  // torch.optim increments it before the call), as float32 scalars on the
  // device: one copy over for the whole model.
  const torch::Tensor steps = torch::tensor(counts).to(params.front().device());
  const std::vector<torch::Tensor> step_views = steps.unbind(0);
  if (name == "adam") {
    at::_fused_adam_(params, grads, slots0, slots1, /*max_exp_avg_sqs=*/{}, step_views, lr, config.beta1,
                     config.beta2, config.weight_decay, config.eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adamw_(params, grads, slots0, slots1, /*max_exp_avg_sqs=*/{}, step_views, lr, config.beta1,
                      config.beta2, config.weight_decay, config.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
  return true;
}

}  // namespace tandem::train
