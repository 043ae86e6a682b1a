#pragma once
// Where torch::optim keeps a parameter's state: keyed by the parameter's
// TensorImpl address, printed as a string up to LibTorch 2.0 and the
// pointer itself after. Code that reads or writes that state (parameter
// servers' checkpoints, the fused step) finds it through this one key.
#include <torch/torch.h>

#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "optim/kernels.hpp"

namespace tandem::train {

namespace detail {
template <typename Key>
Key optimizerStateKeyAs(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}
}  // namespace detail

inline auto optimizerStateKey(const torch::Tensor& p) {
  using Key = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
  return detail::optimizerStateKeyAs<Key>(p);
}

// torch::optim's state of one parameter, seen as the kernels' slots.
struct KernelState {
  std::vector<torch::Tensor> slots;  // optim::slotCount(settings) tensors, in the kernels' order
  int64_t updates = -1;              // updates the parameter has had; -1: torch keeps no count (SGD)
};

// The state torch::optim holds for `p`, or nothing before its first update
// (or ever, for SGD without momentum).
std::optional<KernelState> readKernelState(torch::optim::Optimizer& optimizer, const torch::Tensor& p,
                                           const optim::OptimizerSettings& settings);

// Stores `state` as torch::optim's own state object for `p`, so that a
// checkpoint or torch's own step() reads it back. SGD ignores `updates`.
void writeKernelState(torch::optim::Optimizer& optimizer, const torch::Tensor& p,
                      const optim::OptimizerSettings& settings, const KernelState& state);

}  // namespace tandem::train
