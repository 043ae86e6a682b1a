#pragma once
// Delay-compensated asynchronous SGD (DC-ASGD, Zheng et al., ICML 2017).
// A push computed on values the worker pulled earlier is corrected towards
// the gradient at the values now held, by the first-order Taylor term of
// the Hessian that a gradient's outer product approximates:
//   g' = g + lambda (.) g (.) g (.) (w_now - w_pulled),
// Adaptive form (DC-ASGD-a): lambda = lambda0 / sqrt(ms + eps) per value,
// and ms the moving mean square of the gradients (ms <- 0.95 ms + 0.05 g^2,
// updated first). Constant form (DC-ASGD-c, as MXNet shipped it):
// lambda = lambda0, no mean squares kept, one float stream fewer to read
// and one fewer to write.
// Pure arithmetic on spans; the chunk store keeps what each worker pulled.
#include <span>

#include "core/enum_json.hpp"

namespace tandem::ps {

inline constexpr float kDcMeanSquareDecay = 0.95f;
inline constexpr float kDcEpsilon = 1e-7f;

enum class DelayForm { kAdaptive, kConstant };
inline constexpr EnumNames<DelayForm, 2> kDelayFormNames = {
    {{DelayForm::kAdaptive, "adaptive"}, {DelayForm::kConstant, "constant"}}};
TANDEM_ENUM_JSON(DelayForm, kDelayFormNames, "delay compensation form")

// Turns `grad` into g' in place and updates `mean_square` (adaptive; empty:
// constant lambda0). Every other span has the same length. Built like the
// optimizer kernels (vectorised, no FMA contraction), so every server
// computes the same bits.
void compensateDelay(std::span<float> grad, std::span<const float> now, std::span<const float> pulled,
                     std::span<float> mean_square, float lambda0);

}  // namespace tandem::ps
