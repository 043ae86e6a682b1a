#pragma once
// Architecture options of the registered models, without torch (the run
// config includes this).
#include <cstdint>
#include <vector>

namespace tandem::models {

struct ModelOptions {
  // Hidden layer widths of `mlp`; input and output widths come from InputSpec.
  std::vector<int64_t> mlp_widths{4096, 4096};
};

}  // namespace tandem::models
