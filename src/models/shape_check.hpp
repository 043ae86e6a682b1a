#pragma once
// Spatial-size arithmetic shared by the builders, so that a too-small input is
// rejected at construction with the minimum size instead of failing deep
// inside the first forward with a cryptic ATen shape error.
#include "models/registry.hpp"

#include <cstdint>
#include <functional>
#include <string>

namespace tandem::models::detail {

// Output side of a convolution or pooling window (floor mode); 0 when the
// window does not fit, and 0 stays 0 so that stages can be chained.
int64_t windowOut(int64_t in, int64_t kernel, int64_t stride = 1, int64_t padding = 0);

// Maps an input side length to the side of the last feature map; < 1 means
// the architecture cannot take that input.
using FinalSide = std::function<int64_t(int64_t)>;

// Throws InputError naming the model when any dimension of `input` is not
// positive or when finalSide rejects its height or width; the message gives
// the smallest side the architecture accepts.
void checkInput(const std::string& model, const InputSpec& input, const FinalSide& finalSide);

}  // namespace tandem::models::detail
