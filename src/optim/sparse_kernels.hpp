#pragma once
// Row-sparse optimizer steps: the rows of an embedding table that a batch
// touched, each updated with its summed gradient, the others left alone
// (their moments too: "lazy"). Written after torch.optim's sparse paths,
// formula for formula and in their order of operations: SGD
// (p.add_(grad, alpha=-lr)), Adagrad (state_sum += g^2; p -= clr * g /
// (sqrt(state_sum) + eps)), and SparseAdam, the lazy Adam of TensorFlow's
// LazyAdamOptimizer and TorchRec: the bias correction counts the table's
// steps, not the row's. Torch-free; rows are independent, so different
// rows may be updated from different threads.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::optim {

enum class SparseRule { kSgd, kAdagrad, kLazyAdam };

struct SparseOptimizerSettings {
  SparseRule rule = SparseRule::kAdagrad;
  double lr_decay = 0;             // adagrad: clr = lr / (1 + (step - 1) * lr_decay)
  double initial_accumulator = 0;  // adagrad: state_sum's first value
  double beta1 = 0.9;              // lazy adam
  double beta2 = 0.999;            // lazy adam
  double eps = 1e-10;              // adagrad 1e-10, lazy adam 1e-8 (torch's defaults)
};

// "sgd", "adagrad", "adam" (lazy): what --embedding-optimizer takes.
std::vector<std::string> sparseOptimizerNames();
// torch's defaults for `name`. Throws InputError naming the choices for another.
SparseOptimizerSettings sparseOptimizerDefaults(std::string_view name);
std::string_view sparseOptimizerName(SparseRule rule);

// Floats a row keeps beside its values, per value: sgd 0, adagrad 1
// (state_sum), lazy adam 2 (exp_avg, exp_avg_sq).
int sparseSlotCount(const SparseOptimizerSettings& s);

// A row's block in a table's storage: its `dim` values, then each slot's
// `dim` floats. Rows start as the table sets them; the slots as this says
// (adagrad: initial_accumulator; adam: 0).
void initializeSlots(const SparseOptimizerSettings& s, std::span<float> block, size_t dim);

// One step of a table at rate `lr`, its scalars worked out once for all
// its rows (in double, cast to float where torch casts). `step` is the
// 1-based count of the table's steps, this one included.
struct SparseStep {
  SparseRule rule = SparseRule::kSgd;
  size_t dim = 0;
  float rate = 0;              // sgd: -lr; adagrad: -clr; adam: -step_size
  float one_minus_beta1 = 0;   // adam
  float one_minus_beta2 = 0;   // adam
  float eps = 0;               // adagrad, adam
};
SparseStep sparseStep(const SparseOptimizerSettings& s, double lr, int64_t step, size_t dim);

// Updates one row's block (values and slots) with its summed gradient
// (`dim` floats). Throws Error when the lengths do not match `step.dim`.
void applyRow(const SparseStep& step, std::span<float> block, std::span<const float> grad);

}  // namespace tandem::optim
