#include "models/shape_check.hpp"

#include "core/error.hpp"

namespace tandem::models::detail {

int64_t windowOut(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  if (in < 1 || in + 2 * padding < kernel) return 0;
  return (in + 2 * padding - kernel) / stride + 1;
}

namespace {

// Every architecture here is monotone in the input side, so a linear scan
// finds the threshold; the bound only guards against a broken finalSide.
int64_t minimumSide(const FinalSide& finalSide) {
  constexpr int64_t kSearchLimit = 4096;
  for (int64_t side = 1; side <= kSearchLimit; ++side) {
    if (finalSide(side) >= 1) return side;
  }
  return kSearchLimit;
}

}  // namespace

void checkInput(const std::string& model, const InputSpec& input, const FinalSide& finalSide) {
  if (input.channels < 1 || input.height < 1 || input.width < 1 || input.num_classes < 1) {
    throw InputError(fmt::format(
        "model '{}': input channels, height, width and num_classes must be positive, got "
        "{}x{}x{} with {} classes",
        model, input.channels, input.height, input.width, input.num_classes));
  }
  if (finalSide(input.height) < 1 || finalSide(input.width) < 1) {
    const int64_t side = minimumSide(finalSide);
    throw InputError(fmt::format("model '{}' needs input of at least {}x{} (height x width), got {}x{}",
                                 model, side, side, input.height, input.width));
  }
}

}  // namespace tandem::models::detail
