#pragma once
// Where torch::optim keeps a parameter's state: keyed by the parameter's
// TensorImpl address, printed as a string up to LibTorch 2.0 and the
// pointer itself after. Code that reads or writes that state (parameter
// servers' checkpoints, the fused step) finds it through this one key.
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>

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

}  // namespace tandem::train
