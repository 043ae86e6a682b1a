#pragma once
// Checkpoint file: the envelope of checkpoint_format.hpp (header, JSON
// metadata: run config, step, epoch, model fingerprint) around a torch
// archive with the model, optimizer state and RNG state. Everything is
// validated before it is trusted; files are replaced atomically.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "models/registry.hpp"
#include "train/checkpoint_format.hpp"

namespace tandem::train {

// "name:shape;..." over parameters and buffers: two models can exchange
// state iff their fingerprints are equal.
std::string modelFingerprint(const torch::nn::Module& model);

// Writes atomically (temp file, fsync, rename). Throws Error naming the path.
// `outer`: the servers' outer optimizer of a DiLoCo run, if any.
void saveCheckpoint(const std::filesystem::path& path, const CheckpointMeta& meta, const torch::nn::Module& model,
                    const torch::optim::Optimizer* optimizer, const torch::optim::Optimizer* outer = nullptr);

// One optimizer's state alone, in a file of its own (a DiLoCo worker's
// inner optimizer beside the chief's checkpoint), written atomically.
void saveOptimizerState(const std::filesystem::path& path, const torch::optim::Optimizer& optimizer);
// Throws InputError naming the file when it is missing or unreadable.
void loadOptimizerState(const std::filesystem::path& path, torch::optim::Optimizer& optimizer);
// Tensors alone (a streaming DiLoCo worker's own parameters), in order, and
// back into tensors of the same shapes; errors as loadOptimizerState's.
void saveTensors(const std::filesystem::path& path, const std::vector<torch::Tensor>& tensors);
void loadTensors(const std::filesystem::path& path, const std::vector<torch::Tensor>& into);

class LoadedCheckpoint {
 public:
  // Reads and verifies header, sizes and CRC. Throws InputError naming the
  // file and what is wrong (missing, not a checkpoint, truncated, corrupt).
  explicit LoadedCheckpoint(const std::filesystem::path& path);

  const CheckpointMeta& meta() const { return meta_; }

  // Restores into `model` (and `optimizer` if given) and, if requested, the
  // global torch CPU RNG. Throws InputError if the model's fingerprint
  // differs, naming the first mismatching tensor.
  void restore(torch::nn::Module& model, torch::optim::Optimizer* optimizer, bool restore_rng) const;
  // The outer optimizer's state saved beside the model; InputError when the
  // checkpoint has none.
  void restoreOuter(torch::optim::Optimizer& outer) const;

 private:
  std::filesystem::path path_;
  CheckpointMeta meta_;
  std::string payload_;
};

}  // namespace tandem::train
