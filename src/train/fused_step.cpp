#include "train/fused_step.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ps/optimizer_kernels.hpp"
#include "train/optimizer_state.hpp"

namespace tandem::train {
namespace {

// Kernels are element-wise, so any split gives the same bits; slices this
// size keep every thread busy without scheduling overhead.
constexpr int64_t kSliceFloats = int64_t{1} << 16;

bool kernelReady(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}

std::span<float> floats(const torch::Tensor& t) { return {t.data_ptr<float>(), static_cast<size_t>(t.numel())}; }

struct Work {
  torch::Tensor param, grad, slot_a, slot_b;
  int64_t step = 0;        // adam: this update's 1-based count
  bool first = false;      // sgd: momentum buffer not yet initialised
};

struct Slice {
  size_t work = 0;
  int64_t begin = 0, end = 0;
};

}  // namespace

void fusedOptimizerStep(torch::optim::Optimizer& optimizer, const OptimizerConfig& config, double lr) {
  const bool adam = config.name == "adam";
  const bool momentum = !adam && config.momentum != 0;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined() && (!kernelReady(p) || !kernelReady(p.grad()))) {
        optimizer.step();  // a CUDA or non-contiguous model: torch's own step and state
        return;
      }
    }
  }
  std::vector<Work> work;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      Work w{p, p.grad(), {}, {}, 0, false};
      auto& state = optimizer.state();
      const auto key = optimizerStateKey(p);
      auto it = state.find(key);
      if (adam) {
        if (it == state.end()) {
          auto fresh = std::make_unique<torch::optim::AdamParamState>();
          fresh->step(0);
          fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
          fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
          it = state.insert_or_assign(key, std::move(fresh)).first;
        }
        auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
        st.step(st.step() + 1);
        w.step = st.step();
        w.slot_a = st.exp_avg();
        w.slot_b = st.exp_avg_sq();
      } else if (momentum) {
        if (it == state.end()) {
          auto fresh = std::make_unique<torch::optim::SGDParamState>();
          fresh->momentum_buffer(torch::empty_like(p, torch::MemoryFormat::Contiguous));
          it = state.insert_or_assign(key, std::move(fresh)).first;
          w.first = true;
        }
        w.slot_a = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
      }
      if ((w.slot_a.defined() && !kernelReady(w.slot_a)) || (w.slot_b.defined() && !kernelReady(w.slot_b))) {
        throw std::runtime_error("optimizer state is not a contiguous float32 CPU tensor");
      }
      work.push_back(std::move(w));
    }
  }
  std::vector<Slice> slices;
  for (size_t i = 0; i < work.size(); ++i) {
    const int64_t n = work[i].param.numel();
    for (int64_t b = 0; b < n; b += kSliceFloats) slices.push_back({i, b, std::min(n, b + kSliceFloats)});
  }
  const ps::SgdSettings sgd{lr, config.momentum, config.weight_decay, config.nesterov};
  const ps::AdamSettings adam_settings{lr, config.beta1, config.beta2, config.eps, config.weight_decay};
  at::parallel_for(0, static_cast<int64_t>(slices.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      const Slice& s = slices[static_cast<size_t>(k)];
      const Work& w = work[s.work];
      const auto offset = static_cast<size_t>(s.begin);
      const auto count = static_cast<size_t>(s.end - s.begin);
      auto param = floats(w.param).subspan(offset, count);
      auto grad = floats(w.grad).subspan(offset, count);
      if (adam) {
        ps::adamUpdate(param, grad, floats(w.slot_a).subspan(offset, count), floats(w.slot_b).subspan(offset, count),
                       w.step, adam_settings);
      } else {
        ps::sgdUpdate(param, grad, momentum ? floats(w.slot_a).subspan(offset, count) : std::span<float>(),
                      w.first, sgd);
      }
    }
  });
}

}  // namespace tandem::train
