#pragma once
// Writes a run's metrics.jsonl (one JSON object per line, flushed so a
// crashed or killed run still leaves everything up to its last interval)
// and its summary.json (written atomically at the end).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace tandem::obs {

class MetricsWriter {
 public:
  // Creates run_dir if needed and appends to metrics.jsonl (a resumed run
  // continues the same file; --overwrite clears it first). Throws InputError
  // naming the path if it cannot be created or opened.
  explicit MetricsWriter(const std::filesystem::path& run_dir);

  // Appends one record and flushes. Not thread-safe.
  void append(const nlohmann::json& record);

  // Writes summary.json via temp file + fsync + rename.
  void writeSummary(const nlohmann::json& summary) const;

  const std::filesystem::path& runDir() const { return run_dir_; }

 private:
  std::filesystem::path run_dir_;
  std::ofstream metrics_;
};

// Replaces `path` with `bytes` atomically: a temp file in the same directory
// is written, fsync'd, renamed over `path`, and the directory is fsync'd.
// Throws Error naming the path on any I/O failure; `path` is untouched then.
void writeFileAtomically(const std::filesystem::path& path, std::string_view bytes);

}  // namespace tandem::obs
