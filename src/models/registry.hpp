#pragma once
// Models registered by name. Every model takes NCHW float input (the MLP
// flattens it) and returns unnormalised logits [N, num_classes].
#include <torch/torch.h>

#include "models/model_options.hpp"

#include <cstdint>
#include <functional>
#include <unordered_map>
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

  // Priority scheduling: a built-in model's forward calls the gate before
  // each stage with how many trainable parameters (registration order)
  // must hold their values by then, so a stage waits only for its own
  // weights (and those registered before them). Null: no waits.
  using ParameterGate = std::function<void(size_t count)>;
  void setParameterGate(ParameterGate gate) { gate_ = std::move(gate); }
  // True for models whose forward enters every stage before reading its
  // parameters (the built-in ones); otherwise (TorchScript, user models)
  // the caller waits for every parameter first.
  virtual bool gatesStages() const { return false; }

 protected:
  // Before `stage` reads its parameters.
  void enterStage(const torch::nn::Module& stage);
  // Runs `stages` in order, entering each first.
  torch::Tensor forwardStages(torch::nn::Sequential& stages, torch::Tensor x);

 private:
  ParameterGate gate_;
  std::unordered_map<const torch::nn::Module*, size_t> stage_counts_;  // cached prefix lengths
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
