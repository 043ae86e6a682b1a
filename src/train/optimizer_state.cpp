#include "train/optimizer_state.hpp"

#include "core/error.hpp"

namespace tandem::train {

std::optional<KernelState> readKernelState(torch::optim::Optimizer& optimizer, const torch::Tensor& p,
                                           const optim::OptimizerSettings& settings) {
  auto it = optimizer.state().find(optimizerStateKey(p));
  if (it == optimizer.state().end()) return std::nullopt;
  auto& base = *it->second;
  const std::string& name = settings.name;
  if (name == "adam") {
    auto& st = static_cast<torch::optim::AdamParamState&>(base);
    return KernelState{{st.exp_avg(), st.exp_avg_sq()}, st.step()};
  }
  if (name == "adamw") {
    auto& st = static_cast<torch::optim::AdamWParamState&>(base);
    return KernelState{{st.exp_avg(), st.exp_avg_sq()}, st.step()};
  }
  if (name == "rmsprop") {
    auto& st = static_cast<torch::optim::RMSpropParamState&>(base);
    KernelState state{{st.square_avg()}, st.step()};
    if (settings.momentum > 0) state.slots.push_back(st.momentum_buffer());
    if (settings.centered) state.slots.push_back(st.grad_avg());
    return state;
  }
  return KernelState{{static_cast<torch::optim::SGDParamState&>(base).momentum_buffer()}, -1};
}

void writeKernelState(torch::optim::Optimizer& optimizer, const torch::Tensor& p,
                      const optim::OptimizerSettings& settings, const KernelState& state) {
  enforceEq(state.slots.size(), static_cast<size_t>(optim::slotCount(settings)), "optimizer state slots");
  const std::string& name = settings.name;
  std::unique_ptr<torch::optim::OptimizerParamState> out;
  if (name == "adam" || name == "adamw") {
    auto fill = [&](auto st) {
      st->step(state.updates);
      st->exp_avg(state.slots[0]);
      st->exp_avg_sq(state.slots[1]);
      out = std::move(st);
    };
    if (name == "adam") {
      fill(std::make_unique<torch::optim::AdamParamState>());
    } else {
      fill(std::make_unique<torch::optim::AdamWParamState>());
    }
  } else if (name == "rmsprop") {
    auto st = std::make_unique<torch::optim::RMSpropParamState>();
    st->step(state.updates);
    size_t next = 0;
    st->square_avg(state.slots[next++]);
    if (settings.momentum > 0) st->momentum_buffer(state.slots[next++]);
    if (settings.centered) st->grad_avg(state.slots[next]);
    out = std::move(st);
  } else {
    if (state.slots.empty()) return;  // SGD without momentum keeps no state
    auto st = std::make_unique<torch::optim::SGDParamState>();
    st->momentum_buffer(state.slots[0]);
    out = std::move(st);
  }
  optimizer.state()[optimizerStateKey(p)] = std::move(out);
}

}  // namespace tandem::train
