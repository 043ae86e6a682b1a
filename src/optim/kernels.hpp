#pragma once
// The optimizer updates every mode runs (servers' chunks, the standalone
// and all-reduce fused step), on float spans, written to follow LibTorch's
// torch::optim SGD, Adam, AdamW and RMSprop (1.13) formula for formula and in
// the same order of operations, so 1 server + 1 worker computes what
// standalone does. Torch-free. Each call updates one span; spans are
// independent, so different spans may be updated from different threads.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::optim {

struct SgdSettings {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// Delay compensation (DC-ASGD, ps/delay_compensation.hpp) inside SGD's
// own pass: each gradient value is corrected first, with the same
// operations in the same order as compensateDelay, so the bits are the
// same, but the pass moves `pulled` and `mean_square` only, not the
// gradient a second time: 8 streams of floats instead of 6 + 5 (6 with a
// constant lambda, which keeps no mean squares).
struct DelayCorrection {
  const float* pulled = nullptr;  // the pushing worker's pulled values, the chunk's length
  float* mean_square = nullptr;   // updated first, as in compensateDelay; null: constant lambda0
  float lambda0 = 0;
  float decay = 0;
  float eps = 0;
};

// `momentum_buffer` has the chunk's length; `first_step` tells that it is not
// yet initialised (torch clones the first gradient into it). `correction`:
// delay-compensate each gradient value on the way (null: none).
void sgdUpdate(std::span<float> param, std::span<const float> grad, std::span<float> momentum_buffer,
               bool first_step, const SgdSettings& s, const DelayCorrection* correction = nullptr);

struct AdamSettings {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// `step` is the 1-based count of updates this chunk has had, this one included.
void adamUpdate(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                std::span<float> exp_avg_sq, int64_t step, const AdamSettings& s);

// AdamW: Adam without the L2 term, the weight decay applied to the
// parameter directly (p *= 1 - lr * weight_decay) before the moments.
void adamwUpdate(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
                 std::span<float> exp_avg_sq, int64_t step, const AdamSettings& s);

struct RmsPropSettings {
  double lr = 0.01;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
};

// `momentum_buffer` is used when momentum > 0, `grad_avg` when centered;
// either may be empty otherwise.
void rmspropUpdate(std::span<float> param, std::span<const float> grad, std::span<float> square_avg,
                   std::span<float> momentum_buffer, std::span<float> grad_avg, const RmsPropSettings& s);

// One optimizer, as a run configures it (the learning rate comes per update).
struct OptimizerSettings {
  std::string name = "sgd";  // sgd | adam | adamw | rmsprop
  double momentum = 0.0;     // sgd, rmsprop
  bool nesterov = false;     // sgd
  double weight_decay = 0.0; // L2 on the gradient; adamw: decoupled decay
  double beta1 = 0.9;        // adam, adamw
  double beta2 = 0.999;      // adam, adamw
  double eps = 1e-8;         // adam, adamw, rmsprop
  double alpha = 0.99;       // rmsprop
  bool centered = false;     // rmsprop
};

// "sgd", "adam", "adamw", "rmsprop": the names knownOptimizer takes.
std::vector<std::string> optimizerNames();
bool knownOptimizer(std::string_view name);

// `name`'s settings where the caller gives none: torch::optim's defaults,
// except SGD's momentum, which is 0.9 (Tandem's default). Of the settings
// several optimizers share, momentum (sgd 0.9, rmsprop 0) and weight decay
// (adamw 0.01, others 0) differ by optimizer. `tandem train`, tandem::fit
// and the checkpoints' flags all start from these.
OptimizerSettings optimizerDefaults(std::string_view name);

// The most slots any optimizer keeps (centered RMSprop with momentum), so
// callers can hold a step's slot spans on the stack.
inline constexpr int kMaxOptimizerSlots = 3;

// Per-float state the optimizer keeps, in torch::optim's order: sgd its
// momentum buffer (when momentum != 0); adam and adamw exp_avg, exp_avg_sq;
// rmsprop square_avg, then momentum_buffer (momentum > 0), then grad_avg
// (centered).
int slotCount(const OptimizerSettings& s);

// One update of `param` at rate `lr`. `slots` holds slotCount(s) spans of
// param's length; `step` is the 1-based count of updates, this one included
// (SGD's first step initialises the momentum buffer from the gradient).
// `correction`: SGD only (the caller corrects the gradient itself for the others).
void applyOptimizer(const OptimizerSettings& s, double lr, std::span<float> param, std::span<const float> grad,
                    std::span<const std::span<float>> slots, int64_t step,
                    const DelayCorrection* correction = nullptr);

// sum[i] += addend[i]: how a sync server adds up the workers' shares.
void addInto(std::span<float> sum, std::span<const float> addend);

}  // namespace tandem::optim
