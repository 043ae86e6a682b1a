#pragma once
// Internal to the models layer: one builder per architecture family. The
// registry maps names to these; callers outside the layer use createModel.
#include "models/registry.hpp"

#include <array>
#include <string>

namespace tandem::models::detail {

ModelPtr makeMlp(const InputSpec& input, const ModelOptions& options);

// depth = 6n + 2 (20, 32, 44, 56, 110).
ModelPtr makeCifarResNet(const std::string& name, int64_t depth, const InputSpec& input);

ModelPtr makeAlexNet(const InputSpec& input);

// blocks: bottleneck blocks per stage, e.g. {3, 4, 6, 3} for ResNet-50.
ModelPtr makeImageNetResNet(const std::string& name, const std::array<int64_t, 4>& blocks,
                            const InputSpec& input);

ModelPtr makeInceptionV3(const InputSpec& input);

// batch_norm false: the same network with biased convolutions and no
// BatchNorm, whose math does not depend on how a batch is split.
ModelPtr makeCnn(const InputSpec& input, bool batch_norm);

}  // namespace tandem::models::detail
