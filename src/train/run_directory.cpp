#include "train/run_directory.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <vector>

#include "core/error.hpp"
#include "obs/metrics_writer.hpp"

namespace tandem::train {
namespace fs = std::filesystem;

namespace {

// Fields of the run config that decide which parameters a step produces.
// Run length, output, logging, threads and timeouts are not among them.
const char* const kTrajectoryFields[] = {
    "/model",          "/model_options", "/dataset",       "/batch_size",           "/accumulate",
    "/seed",           "/optimizer",     "/lr",            "/distributed/ps_mode", "/distributed/staleness",
    "/distributed/local_steps", "/distributed/outer_optimizer", "/distributed/outer_lr",
    "/distributed/outer_momentum", "/distributed/fragments", "/distributed/fragment_delay",
    "/distributed/fragment_mix",
};

std::optional<FieldDifference> firstLeafDifference(const std::string& where, const nlohmann::json& a,
                                                   const nlohmann::json& b) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const auto other = b.find(key);
      if (other == b.end()) return FieldDifference{where + "/" + key, value.dump(), "(absent)"};
      if (auto d = firstLeafDifference(where + "/" + key, value, *other)) return d;
    }
    for (const auto& [key, value] : b.items()) {
      if (!a.contains(key)) return FieldDifference{where + "/" + key, "(absent)", value.dump()};
    }
    return std::nullopt;
  }
  if (a == b) return std::nullopt;
  return FieldDifference{where, a.dump(), b.dump()};
}

}  // namespace

namespace {
// step-N`suffix` -> N; nullopt for any other name.
std::optional<int64_t> stepOfFile(const fs::path& file, std::string_view suffix) {
  const std::string name = file.filename().string();
  if (name.rfind("step-", 0) != 0 || name.size() <= 5 + suffix.size() ||
      std::string_view(name).substr(name.size() - suffix.size()) != suffix) {
    return std::nullopt;
  }
  int64_t step = 0;
  const char* begin = name.data() + 5;
  const char* end = name.data() + name.size() - suffix.size();
  auto [ptr, ec] = std::from_chars(begin, end, step);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return step;
}
}  // namespace

std::optional<int64_t> checkpointStep(const fs::path& file) { return stepOfFile(file, ".ckpt"); }

fs::path runRecordPath(const fs::path& out_dir) { return out_dir / "run.json"; }

std::optional<fs::path> latestCheckpoint(const fs::path& out_dir) {
  std::ifstream in(out_dir / "checkpoints" / "latest");
  std::string name;
  if (!in || !std::getline(in, name) || name.empty()) return std::nullopt;
  const fs::path relative(name);
  if (relative.is_absolute() || name.find("..") != std::string::npos) {
    throw InputError(fmt::format("{}: names '{}', which is not a file inside the run directory",
                                 (out_dir / "checkpoints" / "latest").string(), name));
  }
  fs::path path = out_dir / relative;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  return path;
}

void recordLatest(const fs::path& out_dir, const fs::path& checkpoint) {
  fs::create_directories(out_dir / "checkpoints");
  const fs::path relative = checkpoint.lexically_relative(out_dir);
  obs::writeFileAtomically(out_dir / "checkpoints" / "latest", relative.string() + "\n");
}

void pruneCheckpoints(const fs::path& out_dir, int64_t from_step, int keep) {
  pruneStepFiles(out_dir / "checkpoints", ".ckpt", from_step, keep);
}

void pruneStepFiles(const fs::path& dir, std::string_view suffix, int64_t from_step, int keep) {
  std::error_code ec;
  std::vector<std::pair<int64_t, fs::path>> kept;
  const std::string temporary = fmt::format("{}.tmp.", suffix);
  const std::string own_temporary = temporary + std::to_string(::getpid());
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    // A writer that died while saving (a killed chief) left its temporary
    // file; only this process writes here now.
    const std::string name = entry.path().filename().string();
    if (const size_t at = name.find(temporary); at != std::string::npos) {
      if (name.substr(at) != own_temporary) fs::remove(entry.path(), ec);
      continue;
    }
    auto step = stepOfFile(entry.path(), suffix);
    if (!step) continue;
    if (*step > from_step) {
      fs::remove(entry.path(), ec);
    } else {
      kept.emplace_back(*step, entry.path());
    }
  }
  if (keep <= 0 || kept.size() <= static_cast<size_t>(keep)) return;
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < kept.size(); ++i) fs::remove(kept[i].second, ec);
}

void clearRunDirectory(const fs::path& out_dir, const std::string& except) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    if (!except.empty() && entry.path().filename() == except) continue;
    std::error_code remove_ec;
    fs::remove_all(entry.path(), remove_ec);
    if (remove_ec) {
      throw Error(fmt::format("--overwrite: cannot remove {}: {}", entry.path().string(), remove_ec.message()));
    }
  }
}

std::optional<FieldDifference> firstTrajectoryDifference(const nlohmann::json& stored, const nlohmann::json& current,
                                                         bool allow_lr) {
  for (const char* field : kTrajectoryFields) {
    const nlohmann::json::json_pointer pointer(field);
    nlohmann::json a = stored.contains(pointer) ? stored.at(pointer) : nlohmann::json();
    nlohmann::json b = current.contains(pointer) ? current.at(pointer) : nlohmann::json();
    if (allow_lr && std::string(field) == "/optimizer" && a.is_object() && b.is_object()) {
      a.erase("lr");
      b.erase("lr");
    }
    if (auto d = firstLeafDifference(std::string(field).substr(1), a, b)) return d;
  }
  return std::nullopt;
}

nlohmann::json mergeGivenFields(const nlohmann::json& stored, const nlohmann::json& flags,
                                const std::vector<std::string>& given) {
  nlohmann::json merged = stored;
  for (const auto& field : given) {
    const nlohmann::json::json_pointer pointer(field);
    if (flags.contains(pointer)) merged[pointer] = flags.at(pointer);
  }
  return merged;
}

}  // namespace tandem::train
