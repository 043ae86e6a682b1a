#pragma once
// Models registered by name. Every model takes NCHW float input (the MLP
// flattens it) and returns unnormalised logits [N, num_classes].
#include <torch/torch.h>

#include "models/model_options.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem::models {

struct InputSpec {
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t num_classes = 10;
};

class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

using ModelPtr = std::shared_ptr<Model>;

struct ModelInfo {
  std::string name;
  std::string description;
  InputSpec default_input;  // the input `tandem models` counts parameters for
};

// Builds a model by name, or loads a TorchScript file when `name` is a path
// (scripted_model.hpp). Throws InputError naming the model and listing the
// known ones when the name is unknown, or when the input shape is too small
// for the architecture. Thread-safe (no shared state).
ModelPtr createModel(const std::string& name, const InputSpec& input, const ModelOptions& options = {});

// Throws InputError naming `name` and listing the known models unless it is
// registered, or naming the file when a model file does not exist.
// Thread-safe.
void requireKnownModel(const std::string& name);

// Every registered model, sorted by name. Thread-safe.
const std::vector<ModelInfo>& listModels();

// Number of trainable scalar parameters.
int64_t countParameters(const torch::nn::Module& module);

}  // namespace tandem::models
