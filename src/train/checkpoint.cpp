#include "train/checkpoint.hpp"

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "obs/metrics_writer.hpp"

namespace tandem::train {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxMetaBytes = 16u << 20;
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 8 + 4;

template <class T>
void putLe(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
}

template <class T>
T getLe(const char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return static_cast<T>(v);
}

uint32_t crc32Of(std::string_view a, std::string_view b) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(a.data()), a.size());
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(b.data()), b.size());
  return static_cast<uint32_t>(crc);
}

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
                    const torch::optim::Optimizer* optimizer) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  if (optimizer != nullptr) {
    torch::serialize::OutputArchive optimizer_archive;
    optimizer->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
  }
  archive.write("rng_state", at::detail::getDefaultCPUGenerator().get_state());
  std::ostringstream payload_stream;
  archive.save_to(payload_stream);
  std::string payload = payload_stream.str();

  nlohmann::json j = {{"config", meta.config},
                      {"global_step", meta.global_step},
                      {"epoch", meta.epoch},
                      {"model_fingerprint", meta.model_fingerprint}};
  std::string meta_bytes = j.dump();

  std::string file;
  file.reserve(kHeaderBytes + meta_bytes.size() + payload.size());
  file.append(kMagic, sizeof(kMagic));
  putLe<uint32_t>(file, kVersion);
  putLe<uint64_t>(file, meta_bytes.size());
  putLe<uint64_t>(file, payload.size());
  putLe<uint32_t>(file, crc32Of(meta_bytes, payload));
  file += meta_bytes;
  file += payload;
  std::filesystem::create_directories(path.has_parent_path() ? path.parent_path() : ".");
  obs::writeFileAtomically(path, file);
}

LoadedCheckpoint::LoadedCheckpoint(const std::filesystem::path& path) : path_(path) {
  const std::string name = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("checkpoint {}: cannot open: {}", name, std::strerror(errno)));
  std::string header(kHeaderBytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(kHeaderBytes));
  if (in.gcount() != static_cast<std::streamsize>(kHeaderBytes) || std::memcmp(header.data(), kMagic, 8) != 0) {
    throw InputError(fmt::format("checkpoint {}: not a Tandem checkpoint (bad magic or too short)", name));
  }
  auto version = getLe<uint32_t>(header.data() + 8);
  if (version != kVersion) {
    throw InputError(fmt::format("checkpoint {}: format version {} is not supported (expected {})", name, version, kVersion));
  }
  auto meta_size = getLe<uint64_t>(header.data() + 12);
  auto payload_size = getLe<uint64_t>(header.data() + 20);
  auto crc = getLe<uint32_t>(header.data() + 28);
  std::error_code ec;
  auto file_size = std::filesystem::file_size(path, ec);
  if (ec || meta_size > kMaxMetaBytes || file_size < kHeaderBytes ||
      meta_size + payload_size != file_size - kHeaderBytes) {
    throw InputError(fmt::format("checkpoint {}: truncated or corrupt (header claims {} + {} bytes, file has {})", name,
                                 meta_size, payload_size, file_size - std::min<uint64_t>(file_size, kHeaderBytes)));
  }
  std::string meta_bytes(meta_size, '\0');
  payload_.resize(payload_size);
  in.read(meta_bytes.data(), static_cast<std::streamsize>(meta_size));
  in.read(payload_.data(), static_cast<std::streamsize>(payload_size));
  if (!in) throw InputError(fmt::format("checkpoint {}: read failed (truncated?)", name));
  if (crc32Of(meta_bytes, payload_) != crc) {
    throw InputError(fmt::format("checkpoint {}: checksum mismatch, the file is corrupt", name));
  }
  try {
    auto j = nlohmann::json::parse(meta_bytes);
    meta_.config = j.at("config");
    meta_.global_step = j.at("global_step").get<int64_t>();
    meta_.epoch = j.at("epoch").get<int64_t>();
    meta_.model_fingerprint = j.at("model_fingerprint").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("checkpoint {}: bad metadata: {}", name, e.what()));
  }
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
    archive.load_from(payload_.data(), payload_.size());
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

}  // namespace tandem::train
