#include "train/fused_step.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "core/error.hpp"
#include "optim/kernels.hpp"
#include "train/multi_tensor_step.hpp"
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
  torch::Tensor param, grad;
  std::vector<torch::Tensor> slots;
  int64_t step = 0;  // this update's 1-based count
};

struct Slice {
  size_t work = 0;
  int64_t begin = 0, end = 0;
};

}  // namespace

void fusedOptimizerStep(torch::optim::Optimizer& optimizer, const OptimizerConfig& config, double lr) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined() && (!kernelReady(p) || !kernelReady(p.grad()))) {
        // A GPU model: one multi-tensor kernel where torch has one;
        // otherwise (and for non-contiguous CPU tensors) torch's own step.
        if (p.is_cpu() || !multiTensorStep(optimizer, config, lr)) optimizer.step();
        return;
      }
    }
  }
  const auto slot_count = static_cast<size_t>(optim::slotCount(config));
  TANDEM_ENFORCE(slot_count <= optim::kMaxOptimizerSlots, "optimizer {} keeps {} slots", config.name, slot_count);
  std::vector<Work> work;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto state = readKernelState(optimizer, p, config);
      const bool fresh = !state.has_value();
      if (fresh) {
        state = KernelState{};
        for (size_t k = 0; k < slot_count; ++k) {
          state->slots.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
        }
        state->updates = 0;
      }
      // torch counts the update before making it; SGD only tells first from later.
      const int64_t step = fresh ? 1 : (state->updates < 0 ? 2 : state->updates + 1);
      state->updates = step;
      writeKernelState(optimizer, p, config, *state);
      for (const auto& slot : state->slots) {
        if (!kernelReady(slot)) throw std::runtime_error("optimizer state is not a contiguous float32 CPU tensor");
      }
      work.push_back({p, p.grad(), std::move(state->slots), step});
    }
  }
  std::vector<Slice> slices;
  for (size_t i = 0; i < work.size(); ++i) {
    const int64_t n = work[i].param.numel();
    for (int64_t b = 0; b < n; b += kSliceFloats) slices.push_back({i, b, std::min(n, b + kSliceFloats)});
  }
  at::parallel_for(0, static_cast<int64_t>(slices.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      const Slice& s = slices[static_cast<size_t>(k)];
      const Work& w = work[s.work];
      const auto offset = static_cast<size_t>(s.begin);
      const auto count = static_cast<size_t>(s.end - s.begin);
      std::array<std::span<float>, optim::kMaxOptimizerSlots> slots;
      for (size_t j = 0; j < w.slots.size(); ++j) slots[j] = floats(w.slots[j]).subspan(offset, count);
      optim::applyOptimizer(config, lr, floats(w.param).subspan(offset, count), floats(w.grad).subspan(offset, count),
                         std::span(slots.data(), w.slots.size()), w.step);
    }
  });
}

}  // namespace tandem::train
