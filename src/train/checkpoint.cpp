#include "train/checkpoint.hpp"

#include <fmt/ranges.h>

#include <cstring>
#include <functional>
#include <sstream>

#include "core/error.hpp"
#include "obs/metrics_writer.hpp"

namespace tandem::train {
namespace {

std::string fingerprintEntry(const std::string& name, const torch::Tensor& tensor) {
  std::string entry = name + ':';
  for (int64_t d : tensor.sizes()) entry += std::to_string(d) + "x";
  return entry;
}

std::vector<std::string> splitEntries(const std::string& fingerprint) {
  std::vector<std::string> entries;
  size_t start = 0;
  for (size_t end; (end = fingerprint.find(';', start)) != std::string::npos; start = end + 1) {
    entries.push_back(fingerprint.substr(start, end - start));
  }
  return entries;
}

}  // namespace

std::string modelFingerprint(const torch::nn::Module& model) {
  std::string fp;
  for (const auto& p : model.named_parameters()) fp += fingerprintEntry(p.key(), p.value()) + ';';
  for (const auto& b : model.named_buffers()) fp += fingerprintEntry(b.key(), b.value()) + ';';
  return fp;
}

void saveCheckpoint(const std::filesystem::path& path, const CheckpointMeta& meta, const torch::nn::Module& model,
                    const torch::optim::Optimizer* optimizer, const torch::optim::Optimizer* outer) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  if (optimizer != nullptr) {
    torch::serialize::OutputArchive optimizer_archive;
    optimizer->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
  }
  if (outer != nullptr) {
    torch::serialize::OutputArchive outer_archive;
    outer->save(outer_archive);
    archive.write("outer_optimizer", outer_archive);
  }
  archive.write("rng_state", at::detail::getDefaultCPUGenerator().get_state());
  std::ostringstream payload_stream;
  archive.save_to(payload_stream);
  std::string payload = payload_stream.str();

  const std::string file = encodeCheckpoint(meta, payload);
  std::filesystem::create_directories(path.has_parent_path() ? path.parent_path() : ".");
  obs::writeFileAtomically(path, file);
}

namespace {

void saveArchive(const std::filesystem::path& path, torch::serialize::OutputArchive& archive) {
  std::ostringstream bytes;
  archive.save_to(bytes);
  std::filesystem::create_directories(path.parent_path());
  obs::writeFileAtomically(path, bytes.str());
}

// Reads `path` into `read`'s archive; InputError naming the file and `what`
// it should hold when it is missing or unreadable.
void loadArchive(const std::filesystem::path& path, std::string_view what,
                 const std::function<void(torch::serialize::InputArchive&)>& read) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(fmt::format("{}: missing: this worker's {} for the checkpoint it resumes from", path.string(), what));
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path.string(), torch::Device(torch::kCPU));
    read(archive);
  } catch (const c10::Error& e) {
    throw InputError(fmt::format("{}: cannot restore {}: {}", path.string(), what, e.what_without_backtrace()));
  }
}

}  // namespace

void saveOptimizerState(const std::filesystem::path& path, const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  saveArchive(path, archive);
}

void loadOptimizerState(const std::filesystem::path& path, torch::optim::Optimizer& optimizer) {
  loadArchive(path, "optimizer state", [&](torch::serialize::InputArchive& archive) { optimizer.load(archive); });
}

void saveTensors(const std::filesystem::path& path, const std::vector<torch::Tensor>& tensors) {
  torch::serialize::OutputArchive archive;
  for (size_t i = 0; i < tensors.size(); ++i) archive.write(std::to_string(i), tensors[i].detach().cpu());
  saveArchive(path, archive);
}

void loadTensors(const std::filesystem::path& path, const std::vector<torch::Tensor>& into) {
  loadArchive(path, "own parameters", [&](torch::serialize::InputArchive& archive) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < into.size(); ++i) {
      torch::Tensor t;
      archive.read(std::to_string(i), t);
      if (!t.sizes().equals(into[i].sizes())) {
        throw InputError(fmt::format("{}: tensor {} has shape {}, the model's has {}", path.string(), i,
                                     fmt::join(t.sizes(), "x"), fmt::join(into[i].sizes(), "x")));
      }
      into[i].copy_(t);
    }
  });
}

LoadedCheckpoint::LoadedCheckpoint(const std::filesystem::path& path) : path_(path) {
  DecodedCheckpoint decoded = readCheckpointFile(path);
  meta_ = std::move(decoded.meta);
  payload_ = std::move(decoded.payload);
}

void LoadedCheckpoint::restore(torch::nn::Module& model, torch::optim::Optimizer* optimizer, bool restore_rng) const {
  const std::string name = path_.string();
  std::string fingerprint = modelFingerprint(model);
  if (fingerprint != meta_.model_fingerprint) {
    // Name the first tensor that differs so the user sees what changed.
    auto saved = splitEntries(meta_.model_fingerprint);
    auto ours = splitEntries(fingerprint);
    size_t i = 0;
    while (i < saved.size() && i < ours.size() && saved[i] == ours[i]) ++i;
    auto at = [i](const std::vector<std::string>& entries) { return i < entries.size() ? entries[i] : "<none>"; };
    throw InputError(fmt::format("checkpoint {}: model does not match: checkpoint has '{}', this run's model has '{}'",
                                 name, at(saved), at(ours)));
  }
  try {
    torch::serialize::InputArchive archive;
    // Onto the CPU whatever device saved it: a GPU run's checkpoint resumes
    // or evaluates anywhere (the trainer moves the state after restoring).
    archive.load_from(payload_.data(), payload_.size(), torch::Device(torch::kCPU));
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    if (optimizer != nullptr) {
      torch::serialize::InputArchive optimizer_archive;
      if (!archive.try_read("optimizer", optimizer_archive)) {
        throw InputError(fmt::format("checkpoint {}: has no optimizer state to resume from", name));
      }
      optimizer->load(optimizer_archive);
    }
    if (restore_rng) {
      torch::Tensor rng;
      archive.read("rng_state", rng);
      at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
      generator.set_state(rng);
    }
  } catch (const c10::Error& e) {
    throw InputError(fmt::format("checkpoint {}: cannot restore: {}", name, e.what_without_backtrace()));
  }
}

void LoadedCheckpoint::restoreOuter(torch::optim::Optimizer& outer) const {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(payload_.data(), payload_.size(), torch::Device(torch::kCPU));
    torch::serialize::InputArchive outer_archive;
    if (!archive.try_read("outer_optimizer", outer_archive)) {
      throw InputError(fmt::format("checkpoint {}: has no outer optimizer state (it was not saved by a DiLoCo run)",
                                   path_.string()));
    }
    outer.load(outer_archive);
  } catch (const c10::Error& e) {
    throw InputError(fmt::format("checkpoint {}: cannot restore the outer optimizer: {}", path_.string(),
                                 e.what_without_backtrace()));
  }
}

}  // namespace tandem::train
