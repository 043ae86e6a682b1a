#include "ps/delay_compensation.hpp"

#include <cmath>

#include "core/error.hpp"

namespace tandem::ps {
namespace {

void compensateLoop(size_t n, float* __restrict grad, const float* __restrict now, const float* __restrict pulled,
                    float* __restrict mean_square, float lambda0) {
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float ms = kDcMeanSquareDecay * mean_square[i] + (1.0f - kDcMeanSquareDecay) * g * g;
    mean_square[i] = ms;
    grad[i] = g + lambda0 / std::sqrt(ms + kDcEpsilon) * g * g * (now[i] - pulled[i]);
  }
}

void compensateConstantLoop(size_t n, float* __restrict grad, const float* __restrict now,
                            const float* __restrict pulled, float lambda0) {
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    grad[i] = g + lambda0 * g * g * (now[i] - pulled[i]);
  }
}

}  // namespace

void compensateDelay(std::span<float> grad, std::span<const float> now, std::span<const float> pulled,
                     std::span<float> mean_square, float lambda0) {
  const size_t n = grad.size();
  TANDEM_ENFORCE(now.size() == n && pulled.size() == n && (mean_square.empty() || mean_square.size() == n),
                 "delay compensation over {} values with spans of {}, {} and {}", n, now.size(), pulled.size(),
                 mean_square.size());
  if (mean_square.empty()) {
    compensateConstantLoop(n, grad.data(), now.data(), pulled.data(), lambda0);
  } else {
    compensateLoop(n, grad.data(), now.data(), pulled.data(), mean_square.data(), lambda0);
  }
}

}  // namespace tandem::ps
