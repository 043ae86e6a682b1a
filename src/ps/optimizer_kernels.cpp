#include "ps/optimizer_kernels.hpp"

#include <cmath>

#include "core/error.hpp"

namespace tandem::ps {

namespace {
void requireSameLength(size_t a, size_t b, const char* what) { enforceEq(a, b, what); }
}  // namespace

void sgdUpdate(std::span<float> param, std::span<const float> grad, std::span<float> momentum_buffer,
               bool first_step, const SgdSettings& s) {
  requireSameLength(param.size(), grad.size(), "sgd: grad length");
  // torch casts its double hyper-parameters to the tensor's float type.
  const float lr = static_cast<float>(s.lr);
  const float momentum = static_cast<float>(s.momentum);
  const float wd = static_cast<float>(s.weight_decay);
  const bool use_momentum = s.momentum != 0;
  if (use_momentum) requireSameLength(param.size(), momentum_buffer.size(), "sgd: momentum buffer length");
  for (size_t i = 0; i < param.size(); ++i) {
    float d = grad[i];
    if (wd != 0) d = d + wd * param[i];  // d_p.add(p, weight_decay)
    if (use_momentum) {
      float& buf = momentum_buffer[i];
      buf = first_step ? d : buf * momentum + d;  // dampening 0: add_(d_p, 1 - 0)
      d = s.nesterov ? d + momentum * buf : buf;
    }
    param[i] = param[i] + (-lr) * d;  // p.add_(d_p, -lr)
  }
}

void adamUpdate(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                std::span<float> exp_avg_sq, int64_t step, const AdamSettings& s) {
  requireSameLength(param.size(), grad.size(), "adam: grad length");
  requireSameLength(param.size(), exp_avg.size(), "adam: exp_avg length");
  requireSameLength(param.size(), exp_avg_sq.size(), "adam: exp_avg_sq length");
  TANDEM_ENFORCE(step >= 1, "adam step {} must be >= 1", step);
  // Scalars in double, as torch computes them, then cast where torch casts.
  const double bias_correction1 = 1 - std::pow(s.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(s.beta2, static_cast<double>(step));
  const float step_size = static_cast<float>(s.lr / bias_correction1);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
  const float beta1 = static_cast<float>(s.beta1);
  const float one_minus_beta1 = static_cast<float>(1 - s.beta1);
  const float beta2 = static_cast<float>(s.beta2);
  const float one_minus_beta2 = static_cast<float>(1 - s.beta2);
  const float eps = static_cast<float>(s.eps);
  const float wd = static_cast<float>(s.weight_decay);
  for (size_t i = 0; i < param.size(); ++i) {
    float g = grad[i];
    if (wd != 0) g = g + wd * param[i];
    exp_avg[i] = exp_avg[i] * beta1 + one_minus_beta1 * g;            // mul_(beta1).add_(grad, 1 - beta1)
    exp_avg_sq[i] = exp_avg_sq[i] * beta2 + one_minus_beta2 * g * g;  // mul_(beta2).addcmul_(grad, grad, 1 - beta2)
    const float denom = std::sqrt(exp_avg_sq[i]) / sqrt_bc2 + eps;    // (sqrt / sqrt(bc2)).add_(eps)
    param[i] = param[i] + (-step_size) * (exp_avg[i] / denom);        // addcdiv_(exp_avg, denom, -step_size)
  }
}

void addInto(std::span<float> sum, std::span<const float> addend) {
  requireSameLength(sum.size(), addend.size(), "addInto: addend length");
  float* __restrict s = sum.data();
  const float* __restrict a = addend.data();
  for (size_t i = 0; i < sum.size(); ++i) s[i] += a[i];
}

}  // namespace tandem::ps
