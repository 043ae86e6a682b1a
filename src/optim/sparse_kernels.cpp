#include "optim/sparse_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

// Compiled as kernels.cpp is (CMakeLists: no contraction into FMA), so a
// row's update has the same bits wherever it runs: on a server, or in the
// standalone trainer's table.
namespace tandem::optim {

std::vector<std::string> sparseOptimizerNames() { return {"sgd", "adagrad", "adam"}; }

std::string_view sparseOptimizerName(SparseRule rule) {
  switch (rule) {
    case SparseRule::kSgd: return "sgd";
    case SparseRule::kAdagrad: return "adagrad";
    case SparseRule::kLazyAdam: return "adam";
  }
  return "?";
}

SparseOptimizerSettings sparseOptimizerDefaults(std::string_view name) {
  SparseOptimizerSettings s;
  if (name == "sgd") {
    s.rule = SparseRule::kSgd;
  } else if (name == "adagrad") {
    s.rule = SparseRule::kAdagrad;
    s.eps = 1e-10;
  } else if (name == "adam") {
    s.rule = SparseRule::kLazyAdam;
    s.eps = 1e-8;
  } else {
    throw InputError(fmt::format("embedding optimizer '{}': expected one of sgd, adagrad, adam (lazy: only the "
                                 "rows a batch touched move, their moments too)",
                                 name));
  }
  return s;
}

int sparseSlotCount(const SparseOptimizerSettings& s) {
  switch (s.rule) {
    case SparseRule::kSgd: return 0;
    case SparseRule::kAdagrad: return 1;
    case SparseRule::kLazyAdam: return 2;
  }
  return 0;
}

void initializeSlots(const SparseOptimizerSettings& s, std::span<float> block, size_t dim) {
  enforceEq(block.size(), dim * static_cast<size_t>(1 + sparseSlotCount(s)), "embedding row block length");
  const float first = s.rule == SparseRule::kAdagrad ? static_cast<float>(s.initial_accumulator) : 0.0f;
  std::fill(block.begin() + static_cast<std::ptrdiff_t>(dim), block.end(), first);
}

SparseStep sparseStep(const SparseOptimizerSettings& s, double lr, int64_t step, size_t dim) {
  TANDEM_ENFORCE(step >= 1, "sparse step {} must be >= 1", step);
  SparseStep out;
  out.rule = s.rule;
  out.dim = dim;
  out.eps = static_cast<float>(s.eps);
  switch (s.rule) {
    case SparseRule::kSgd:
      out.rate = static_cast<float>(-lr);
      break;
    case SparseRule::kAdagrad:
      out.rate = static_cast<float>(-(lr / (1 + static_cast<double>(step - 1) * s.lr_decay)));
      break;
    case SparseRule::kLazyAdam: {
      const double bias_correction1 = 1 - std::pow(s.beta1, static_cast<double>(step));
      const double bias_correction2 = 1 - std::pow(s.beta2, static_cast<double>(step));
      out.rate = static_cast<float>(-(lr * std::sqrt(bias_correction2) / bias_correction1));
      out.one_minus_beta1 = static_cast<float>(1 - s.beta1);
      out.one_minus_beta2 = static_cast<float>(1 - s.beta2);
      break;
    }
  }
  return out;
}

void applyRow(const SparseStep& step, std::span<float> block, std::span<const float> grad) {
  const size_t n = step.dim;
  enforceEq(grad.size(), n, "embedding row gradient length");
  float* __restrict p = block.data();
  const float* __restrict g = grad.data();
  switch (step.rule) {
    case SparseRule::kSgd:
      enforceEq(block.size(), n, "embedding row block length (sgd)");
      for (size_t i = 0; i < n; ++i) p[i] = p[i] + step.rate * g[i];
      return;
    case SparseRule::kAdagrad: {
      enforceEq(block.size(), 2 * n, "embedding row block length (adagrad)");
      float* __restrict sum = p + n;
      for (size_t i = 0; i < n; ++i) {
        sum[i] = sum[i] + g[i] * g[i];  // state_sum.add_(grad_values.pow(2))
        const float std = std::sqrt(sum[i]) + step.eps;
        p[i] = p[i] + step.rate * (g[i] / std);
      }
      return;
    }
    case SparseRule::kLazyAdam: {
      enforceEq(block.size(), 3 * n, "embedding row block length (adam)");
      float* __restrict m = p + n;
      float* __restrict v = p + 2 * n;
      for (size_t i = 0; i < n; ++i) {
        // SparseAdam's order: old += (1 - b) * (new - old), then numer and
        // denom from the update added back to the old value.
        const float m_update = (g[i] - m[i]) * step.one_minus_beta1;
        const float v_update = (g[i] * g[i] - v[i]) * step.one_minus_beta2;
        const float numer = m_update + m[i];
        const float denom = std::sqrt(v_update + v[i]) + step.eps;
        m[i] = m[i] + m_update;
        v[i] = v[i] + v_update;
        p[i] = p[i] + step.rate * (numer / denom);
      }
      return;
    }
  }
}

}  // namespace tandem::optim
