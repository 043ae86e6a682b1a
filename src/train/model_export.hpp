#pragma once
// A trained model in the formats Python reads: a state dict (torch.load
// returns a dict of name to tensor, with the names a torch.nn.Module of the
// same structure expects) and, for TorchScript models, the scripted module
// with its trained weights (torch.jit.load runs it).
#include <filesystem>

#include "models/registry.hpp"

namespace tandem::train {

// Every parameter and buffer of `model`, under its dotted name, written as
// torch.save would. Replaces `path` atomically; throws Error naming it.
void exportStateDict(const models::Model& model, const std::filesystem::path& path);

// The TorchScript module `model` was loaded from, with its current weights.
// Throws InputError unless `model` came from a TorchScript file; Error
// naming `path` when it cannot be written. Replaces `path` atomically.
void exportTorchScript(models::Model& model, const std::filesystem::path& path);

}  // namespace tandem::train
