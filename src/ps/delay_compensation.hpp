#pragma once
// Delay-compensated asynchronous SGD (DC-ASGD-a, Zheng et al., ICML 2017).
// A push computed on values the worker pulled earlier is corrected towards
// the gradient at the values now held, by the first-order Taylor term of
// the Hessian that a gradient's outer product approximates:
//   g' = g + lambda (.) g (.) g (.) (w_now - w_pulled),
// with lambda = lambda0 / sqrt(ms + eps) per value, and ms the moving mean
// square of the gradients (ms <- 0.95 ms + 0.05 g^2, updated first).
// Pure arithmetic on spans; the chunk store keeps what each worker pulled.
#include <span>

namespace tandem::ps {

inline constexpr float kDcMeanSquareDecay = 0.95f;
inline constexpr float kDcEpsilon = 1e-7f;

// Turns `grad` into g' in place and updates `mean_square`. Every span has
// the same length. Built like the optimizer kernels (vectorised, no FMA
// contraction), so every server computes the same bits.
void compensateDelay(std::span<float> grad, std::span<const float> now, std::span<const float> pulled,
                     std::span<float> mean_square, float lambda0);

}  // namespace tandem::ps
