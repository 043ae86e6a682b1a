#include "optim/kernels.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

// Each loop is compiled three times, for AVX-512, AVX2 and the baseline,
// and the loader picks the widest the CPU has (GCC's function
// multi-versioning): an SSE-only build ran Adam at less than half the speed
// of LibTorch's fused kernel. Contraction into FMA is off for this file
// (CMakeLists), so every version computes each element with the same IEEE
// operations, in the same order, and returns the same bits: the PS and the
// trainer stay bit-identical on any machine.
// Not under a sanitizer: the loader runs the version resolvers before the
// sanitizer's runtime is up, and the TSan build crashed at start-up.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TANDEM_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TANDEM_SANITIZED 1
#endif
#ifdef TANDEM_SANITIZED
#define TANDEM_SIMD_CLONES
#else
#define TANDEM_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

namespace tandem::optim {

namespace {
void requireSameLength(size_t a, size_t b, const char* what) { enforceEq(a, b, what); }

// The loops, one per combination of options, with every branch hoisted out
// and no aliasing between arrays, so each vectorises. Inlined into the
// multi-versioned entry points below, they take each entry's instruction set.
#define TANDEM_LOOP inline __attribute__((always_inline))

// Which delay correction a loop applies first (DelayCorrection).
enum class Dc { kNone, kAdaptive, kConstant };

template <bool kDecay, bool kMomentum, bool kNesterov, Dc kCorrect = Dc::kNone>
TANDEM_LOOP void sgdLoop(size_t n, float* __restrict param, const float* __restrict grad, float* __restrict buffer,
                         bool first, float lr, float momentum, float wd, const float* __restrict pulled = nullptr,
                         float* __restrict mean_square = nullptr, float lambda0 = 0, float decay = 0,
                         float eps = 0) {
  for (size_t i = 0; i < n; ++i) {
    float d = grad[i];
    if constexpr (kCorrect == Dc::kAdaptive) {  // compensateDelay's arithmetic, in its order
      const float ms = decay * mean_square[i] + (1.0f - decay) * d * d;
      mean_square[i] = ms;
      d = d + lambda0 / std::sqrt(ms + eps) * d * d * (param[i] - pulled[i]);
    } else if constexpr (kCorrect == Dc::kConstant) {
      d = d + lambda0 * d * d * (param[i] - pulled[i]);
    }
    if constexpr (kDecay) d = d + wd * param[i];  // d_p.add(p, weight_decay)
    if constexpr (kMomentum) {
      const float b = first ? d : buffer[i] * momentum + d;  // dampening 0: add_(d_p, 1 - 0)
      buffer[i] = b;
      d = kNesterov ? d + momentum * b : b;
    }
    param[i] = param[i] + (-lr) * d;  // p.add_(d_p, -lr)
  }
}

template <bool kDecay>
TANDEM_LOOP void adamLoop(size_t n, float* __restrict param, const float* __restrict grad, float* __restrict exp_avg,
                          float* __restrict exp_avg_sq, float step_size, float sqrt_bc2, float beta1,
                          float one_minus_beta1, float beta2, float one_minus_beta2, float eps, float wd) {
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i];
    if constexpr (kDecay) g = g + wd * param[i];
    const float m = exp_avg[i] * beta1 + one_minus_beta1 * g;        // mul_(beta1).add_(grad, 1 - beta1)
    const float v = exp_avg_sq[i] * beta2 + one_minus_beta2 * g * g;  // mul_(beta2).addcmul_(grad, grad, 1 - beta2)
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = std::sqrt(v) / sqrt_bc2 + eps;  // (sqrt / sqrt(bc2)).add_(eps)
    param[i] = param[i] + (-step_size) * (m / denom);   // addcdiv_(exp_avg, denom, -step_size)
  }
}

template <bool kDecay, bool kCentered, bool kMomentum>
TANDEM_LOOP void rmspropLoop(size_t n, float* __restrict param, const float* __restrict grad,
                             float* __restrict square_avg, float* __restrict buffer, float* __restrict grad_avg,
                             float lr, float alpha, float one_minus_alpha, float eps, float wd, float momentum) {
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i];
    if constexpr (kDecay) g = g + wd * param[i];                      // grad.add(p, weight_decay)
    const float sq = square_avg[i] * alpha + one_minus_alpha * g * g;  // mul_(alpha).addcmul_(g, g, 1 - alpha)
    square_avg[i] = sq;
    float avg;
    if constexpr (kCentered) {
      const float ga = grad_avg[i] * alpha + one_minus_alpha * g;  // mul_(alpha).add_(g, 1 - alpha)
      grad_avg[i] = ga;
      avg = std::sqrt(sq + (-1.0f) * ga * ga) + eps;  // addcmul(ga, ga, -1).sqrt_().add_(eps)
    } else {
      avg = std::sqrt(sq) + eps;
    }
    if constexpr (kMomentum) {
      const float b = buffer[i] * momentum + g / avg;  // mul_(momentum).addcdiv_(g, avg)
      buffer[i] = b;
      param[i] = param[i] + (-lr) * b;  // p.add_(buf, -lr)
    } else {
      param[i] = param[i] + (-lr) * (g / avg);  // p.addcdiv_(g, avg, -lr)
    }
  }
}

// sgdLoop with the correction of form K, one instance per option set
// (inlined into sgdUpdate's multi-versioned body).
template <Dc K>
TANDEM_LOOP void sgdCorrectedAs(size_t n, float* p, const float* g, float* b, bool first, float lr, float momentum,
                                float wd, bool decay, bool use_momentum, bool nesterov, const DelayCorrection& c) {
  const float* q = c.pulled;
  float* ms = c.mean_square;
  if (!use_momentum) {
    decay ? sgdLoop<true, false, false, K>(n, p, g, b, first, lr, momentum, wd, q, ms, c.lambda0, c.decay, c.eps)
          : sgdLoop<false, false, false, K>(n, p, g, b, first, lr, momentum, wd, q, ms, c.lambda0, c.decay, c.eps);
  } else if (nesterov) {
    decay ? sgdLoop<true, true, true, K>(n, p, g, b, first, lr, momentum, wd, q, ms, c.lambda0, c.decay, c.eps)
          : sgdLoop<false, true, true, K>(n, p, g, b, first, lr, momentum, wd, q, ms, c.lambda0, c.decay, c.eps);
  } else {
    decay ? sgdLoop<true, true, false, K>(n, p, g, b, first, lr, momentum, wd, q, ms, c.lambda0, c.decay, c.eps)
          : sgdLoop<false, true, false, K>(n, p, g, b, first, lr, momentum, wd, q, ms, c.lambda0, c.decay, c.eps);
  }
}

TANDEM_LOOP void sgdCorrected(size_t n, float* p, const float* g, float* b, bool first, float lr, float momentum,
                              float wd, bool decay, bool use_momentum, bool nesterov, const DelayCorrection& c) {
  c.mean_square != nullptr
      ? sgdCorrectedAs<Dc::kAdaptive>(n, p, g, b, first, lr, momentum, wd, decay, use_momentum, nesterov, c)
      : sgdCorrectedAs<Dc::kConstant>(n, p, g, b, first, lr, momentum, wd, decay, use_momentum, nesterov, c);
}

}  // namespace

TANDEM_SIMD_CLONES
void sgdUpdate(std::span<float> param, std::span<const float> grad, std::span<float> momentum_buffer,
               bool first_step, const SgdSettings& s, const DelayCorrection* correction) {
  requireSameLength(param.size(), grad.size(), "sgd: grad length");
  // torch casts its double hyper-parameters to the tensor's float type.
  const float lr = static_cast<float>(s.lr);
  const float momentum = static_cast<float>(s.momentum);
  const float wd = static_cast<float>(s.weight_decay);
  const bool use_momentum = s.momentum != 0;
  if (use_momentum) requireSameLength(param.size(), momentum_buffer.size(), "sgd: momentum buffer length");
  const size_t n = param.size();
  float* p = param.data();
  const float* g = grad.data();
  float* b = momentum_buffer.data();
  const bool decay = wd != 0;
  if (correction != nullptr) {
    sgdCorrected(n, p, g, b, first_step, lr, momentum, wd, decay, use_momentum, s.nesterov, *correction);
    return;
  }
  if (!use_momentum) {
    decay ? sgdLoop<true, false, false>(n, p, g, b, first_step, lr, momentum, wd)
          : sgdLoop<false, false, false>(n, p, g, b, first_step, lr, momentum, wd);
  } else if (s.nesterov) {
    decay ? sgdLoop<true, true, true>(n, p, g, b, first_step, lr, momentum, wd)
          : sgdLoop<false, true, true>(n, p, g, b, first_step, lr, momentum, wd);
  } else {
    decay ? sgdLoop<true, true, false>(n, p, g, b, first_step, lr, momentum, wd)
          : sgdLoop<false, true, false>(n, p, g, b, first_step, lr, momentum, wd);
  }
}

TANDEM_SIMD_CLONES
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
  if (wd != 0) {
    adamLoop<true>(param.size(), param.data(), grad.data(), exp_avg.data(), exp_avg_sq.data(), step_size, sqrt_bc2,
                   beta1, one_minus_beta1, beta2, one_minus_beta2, eps, wd);
  } else {
    adamLoop<false>(param.size(), param.data(), grad.data(), exp_avg.data(), exp_avg_sq.data(), step_size, sqrt_bc2,
                    beta1, one_minus_beta1, beta2, one_minus_beta2, eps, wd);
  }
}

TANDEM_SIMD_CLONES
static void scaleInPlace(std::span<float> values, float factor) {
  for (float& v : values) v = v * factor;
}

void adamwUpdate(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                 std::span<float> exp_avg_sq, int64_t step, const AdamSettings& s) {
  // p.mul_(1 - lr * weight_decay), the factor computed in double as torch does.
  if (s.weight_decay != 0) scaleInPlace(param, static_cast<float>(1 - s.lr * s.weight_decay));
  AdamSettings plain = s;
  plain.weight_decay = 0;
  adamUpdate(param, grad, exp_avg, exp_avg_sq, step, plain);
}

TANDEM_SIMD_CLONES
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
  const size_t n = param.size();
  float* p = param.data();
  const float* g = grad.data();
  float* sq = square_avg.data();
  float* b = momentum_buffer.data();
  float* ga = grad_avg.data();
  const int variant = (wd != 0 ? 4 : 0) + (s.centered ? 2 : 0) + (use_momentum ? 1 : 0);
  switch (variant) {
#define TANDEM_RMSPROP_CASE(k, d, c, m) \
  case k: rmspropLoop<d, c, m>(n, p, g, sq, b, ga, lr, alpha, one_minus_alpha, eps, wd, momentum); break;
    TANDEM_RMSPROP_CASE(0, false, false, false)
    TANDEM_RMSPROP_CASE(1, false, false, true)
    TANDEM_RMSPROP_CASE(2, false, true, false)
    TANDEM_RMSPROP_CASE(3, false, true, true)
    TANDEM_RMSPROP_CASE(4, true, false, false)
    TANDEM_RMSPROP_CASE(5, true, false, true)
    TANDEM_RMSPROP_CASE(6, true, true, false)
    TANDEM_RMSPROP_CASE(7, true, true, true)
#undef TANDEM_RMSPROP_CASE
  }
}

std::vector<std::string> optimizerNames() { return {"sgd", "adam", "adamw", "rmsprop"}; }

bool knownOptimizer(std::string_view name) {
  const auto names = optimizerNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

OptimizerSettings optimizerDefaults(std::string_view name) {
  OptimizerSettings s;
  s.name = std::string(name);
  s.momentum = name == "sgd" ? 0.9 : 0.0;
  s.weight_decay = name == "adamw" ? 0.01 : 0.0;
  return s;
}

int slotCount(const OptimizerSettings& s) {
  if (s.name == "adam" || s.name == "adamw") return 2;
  if (s.name == "rmsprop") return 1 + (s.momentum > 0 ? 1 : 0) + (s.centered ? 1 : 0);
  return s.momentum != 0 ? 1 : 0;
}

void applyOptimizer(const OptimizerSettings& s, double lr, std::span<float> param, std::span<const float> grad,
                    std::span<const std::span<float>> slots, int64_t step, const DelayCorrection* correction) {
  enforceEq(slots.size(), static_cast<size_t>(slotCount(s)), "optimizer slot count");
  TANDEM_ENFORCE(correction == nullptr || s.name == "sgd", "a fused delay correction with {}", s.name);
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
              {lr, s.momentum, s.weight_decay, s.nesterov}, correction);
  }
}

TANDEM_SIMD_CLONES
void addInto(std::span<float> sum, std::span<const float> addend) {
  requireSameLength(sum.size(), addend.size(), "addInto: addend length");
  float* __restrict s = sum.data();
  const float* __restrict a = addend.data();
  for (size_t i = 0; i < sum.size(); ++i) s[i] += a[i];
}

}  // namespace tandem::optim
