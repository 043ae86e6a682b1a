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

#include "models/registry.hpp"
#include "train/checkpoint_format.hpp"

namespace tandem::train {

// "name:shape;..." over parameters and buffers: two models can exchange
// state iff their fingerprints are equal.
std::string modelFingerprint(const torch::nn::Module& model);

// Writes atomically (temp file, fsync, rename). Throws Error naming the path.
void saveCheckpoint(const std::filesystem::path& path, const CheckpointMeta& meta, const torch::nn::Module& model,
                    const torch::optim::Optimizer* optimizer);

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

 private:
  std::filesystem::path path_;
  CheckpointMeta meta_;
  std::string payload_;
};

}  // namespace tandem::train
