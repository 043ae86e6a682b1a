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

void adamwUpdate(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                 std::span<float> exp_avg_sq, int64_t step, const AdamSettings& s) {
  // p.mul_(1 - lr * weight_decay), the factor computed in double as torch does.
  if (s.weight_decay != 0) {
    const float decay = static_cast<float>(1 - s.lr * s.weight_decay);
    for (float& p : param) p = p * decay;
  }
  AdamSettings plain = s;
  plain.weight_decay = 0;
  adamUpdate(param, grad, exp_avg, exp_avg_sq, step, plain);
}

void rmspropUpdate(std::span<float> param, std::span<const float> grad, std::span<float> square_avg,
                   std::span<float> momentum_buffer, std::span<float> grad_avg, const RmsPropSettings& s) {
  requireSameLength(param.size(), grad.size(), "rmsprop: grad length");
  requireSameLength(param.size(), square_avg.size(), "rmsprop: square_avg length");
  const bool use_momentum = s.momentum > 0;
  if (use_momentum) requireSameLength(param.size(), momentum_buffer.size(), "rmsprop: momentum buffer length");
  if (s.centered) requireSameLength(param.size(), grad_avg.size(), "rmsprop: grad_avg length");
  const float lr = static_cast<float>(s.lr);
  const float alpha = static_cast<float>(s.alpha);
  const float one_minus_alpha = static_cast<float>(1 - s.alpha);
  const float eps = static_cast<float>(s.eps);
  const float wd = static_cast<float>(s.weight_decay);
  const float momentum = static_cast<float>(s.momentum);
  for (size_t i = 0; i < param.size(); ++i) {
    float g = grad[i];
    if (wd != 0) g = g + wd * param[i];                                  // grad.add(p, weight_decay)
    square_avg[i] = square_avg[i] * alpha + one_minus_alpha * g * g;    // mul_(alpha).addcmul_(g, g, 1 - alpha)
    float avg;
    if (s.centered) {
      grad_avg[i] = grad_avg[i] * alpha + one_minus_alpha * g;          // mul_(alpha).add_(g, 1 - alpha)
      avg = std::sqrt(square_avg[i] + (-1.0f) * grad_avg[i] * grad_avg[i]) + eps;  // addcmul(ga, ga, -1).sqrt_().add_(eps)
    } else {
      avg = std::sqrt(square_avg[i]) + eps;
    }
    if (use_momentum) {
      momentum_buffer[i] = momentum_buffer[i] * momentum + g / avg;    // mul_(momentum).addcdiv_(g, avg)
      param[i] = param[i] + (-lr) * momentum_buffer[i];                 // p.add_(buf, -lr)
    } else {
      param[i] = param[i] + (-lr) * (g / avg);                          // p.addcdiv_(g, avg, -lr)
    }
  }
}

bool knownOptimizer(std::string_view name) {
  return name == "sgd" || name == "adam" || name == "adamw" || name == "rmsprop";
}

int slotCount(const OptimizerSettings& s) {
  if (s.name == "adam" || s.name == "adamw") return 2;
  if (s.name == "rmsprop") return 1 + (s.momentum > 0 ? 1 : 0) + (s.centered ? 1 : 0);
  return s.momentum != 0 ? 1 : 0;
}

void applyOptimizer(const OptimizerSettings& s, double lr, std::span<float> param, std::span<const float> grad,
                    std::span<const std::span<float>> slots, int64_t step) {
  enforceEq(slots.size(), static_cast<size_t>(slotCount(s)), "optimizer slot count");
  if (s.name == "adam" || s.name == "adamw") {
    const AdamSettings a{lr, s.beta1, s.beta2, s.eps, s.weight_decay};
    if (s.name == "adam") {
      adamUpdate(param, grad, slots[0], slots[1], step, a);
    } else {
      adamwUpdate(param, grad, slots[0], slots[1], step, a);
    }
  } else if (s.name == "rmsprop") {
    size_t next = 1;
    const std::span<float> buffer = s.momentum > 0 ? slots[next++] : std::span<float>();
    const std::span<float> grad_avg = s.centered ? slots[next] : std::span<float>();
    rmspropUpdate(param, grad, slots[0], buffer, grad_avg, {lr, s.alpha, s.eps, s.weight_decay, s.momentum, s.centered});
  } else {
    sgdUpdate(param, grad, slots.empty() ? std::span<float>() : slots[0], step == 1,
              {lr, s.momentum, s.weight_decay, s.nesterov});
  }
}

void addInto(std::span<float> sum, std::span<const float> addend) {
  requireSameLength(sum.size(), addend.size(), "addInto: addend length");
  float* __restrict s = sum.data();
  const float* __restrict a = addend.data();
  for (size_t i = 0; i < sum.size(); ++i) s[i] += a[i];
}

}  // namespace tandem::ps
