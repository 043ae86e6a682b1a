#pragma once
// Writes a run's metrics.jsonl (one JSON object per line, flushed so a
// crashed or killed run still leaves everything up to its last interval),
// the same scalars as a TensorBoard event file, and its summary.json
// (written atomically at the end).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "obs/tfevents.hpp"

namespace tandem::obs {

class MetricsWriter {
 public:
  // Creates run_dir if needed and appends to metrics.jsonl (a resumed run
  // continues the same file; --overwrite clears it first). Each writer also
  // starts a new TensorBoard event file in run_dir. Throws InputError naming
  // the path if either cannot be created or opened.
  explicit MetricsWriter(const std::filesystem::path& run_dir);

  // Appends one record, with a "time" field (Unix seconds) added unless it
  // has one, and flushes. A record with an integer "step" also goes to the
  // event file as tensorBoardScalars(record) at that step and time. Throws
  // Error naming the event file if it cannot be written. Not thread-safe.
  void append(const nlohmann::json& record);

  // Writes summary.json via temp file + fsync + rename.
  void writeSummary(const nlohmann::json& summary) const;

  const std::filesystem::path& runDir() const { return run_dir_; }
  const std::filesystem::path& eventsPath() const { return events_->path(); }

 private:
  std::filesystem::path run_dir_;
  std::ofstream metrics_;
  std::optional<EventFileWriter> events_;  // set once run_dir exists
};

// The TensorBoard tags of a metrics record, one per numeric field:
// "<type>/<field>" (train/loss, eval/test_accuracy; no prefix without a
// "type"), "step_time/<phase>" in seconds for step_breakdown entries
// ("step_time/total" for the whole step), "<type>/<field>/<key>" for other
// nested numbers. "step", "time" and non-numeric fields give none.
std::vector<Scalar> tensorBoardScalars(const nlohmann::json& record);

// Replaces `path` with `bytes` atomically: a temp file in the same directory
// is written, fsync'd, renamed over `path`, and the directory is fsync'd.
// Throws Error naming the path on any I/O failure; `path` is untouched then.
void writeFileAtomically(const std::filesystem::path& path, std::string_view bytes);

// Appends `record` as one JSON line to `path` (a record file such as
// OUT/restarts.jsonl that several processes append to), creating the file
// and its directory if needed. Throws Error naming the file if it cannot.
void appendJsonLine(const std::filesystem::path& path, const nlohmann::json& record);

}  // namespace tandem::obs
