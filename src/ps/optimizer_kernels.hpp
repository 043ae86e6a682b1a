#pragma once
// Server-side optimizer updates on float spans, written to follow
// LibTorch's torch::optim SGD and Adam (1.13) formula for formula and in the
// same order of operations, so 1 server + 1 worker tracks standalone
// training. Torch-free. Each call updates one chunk; chunks are independent,
// so different chunks may be updated from different threads at once.
#include <cstdint>
#include <span>

namespace tandem::ps {

struct SgdSettings {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// `momentum_buffer` has the chunk's length; `first_step` tells that it is not
// yet initialised (torch clones the first gradient into it).
void sgdUpdate(std::span<float> param, std::span<const float> grad, std::span<float> momentum_buffer,
               bool first_step, const SgdSettings& s);

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

// sum[i] += addend[i]: how a sync server adds up the workers' shares.
void addInto(std::span<float> sum, std::span<const float> addend);

}  // namespace tandem::ps
