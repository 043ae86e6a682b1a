#pragma once
// Models brought as TorchScript files (torch.jit.script or torch.jit.trace,
// then torch.jit.save). The loaded module's parameters and buffers are
// mirrored, as the same tensors and under the same dotted names, into a
// Model, so buckets, chunks, optimizers and checkpoints treat it exactly as
// a built-in model.
#include <torch/script.h>

#include <string>

#include "models/registry.hpp"

namespace tandem::models {

// Whether --model names a file rather than a registered model: it contains
// a '/' or ends in .pt, .pth, .ts or .torchscript. Thread-safe.
bool isModelFile(const std::string& name);

// Content digest of a model file (FNV-1a 64 of its bytes, 16 hex digits):
// tasks given files that differ are refused at rendezvous. Throws InputError
// naming the path when it cannot be read.
std::string modelFileDigest(const std::string& path);

// Throws InputError naming the path unless it is a readable regular file.
void requireModelFile(const std::string& path);

class ScriptedModel : public Model {
 public:
  // Throws InputError naming `path` when it is not a TorchScript archive or
  // has no forward(Tensor) -> Tensor.
  explicit ScriptedModel(const std::string& path);

  torch::Tensor forward(torch::Tensor x) override;
  void train(bool on = true) override;

  // The scripted module, sharing every parameter and buffer with this Model:
  // saving it writes the weights as they are now.
  torch::jit::Module& module() { return module_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  torch::jit::Module module_;
};

// Loads `path` and checks, with one probe forward in eval mode, that it maps
// a batch of `input`'s shape to [batch, num_classes]. Throws InputError
// naming the file and both shapes otherwise.
ModelPtr loadScriptedModel(const std::string& path, const InputSpec& input);

}  // namespace tandem::models
