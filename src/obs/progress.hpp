#pragma once
// Reports training progress: a live single line with ETA on a terminal,
// plain periodic log lines otherwise (CI logs, files).
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "core/clock.hpp"

namespace tandem::obs {

struct ProgressSample {
  int64_t step = 0;         // steps done so far (global)
  int64_t epoch = 0;
  double loss = 0;
  double samples_per_sec = 0;         // the job's
  double lr = 0;
  double worker_samples_per_sec = 0;  // this worker's own
};

// kLive: one line redrawn with '\r' (a terminal). kPlain: a line every few
// seconds (logs). kRecords: a machine-readable line per update for a
// launcher that shows the whole job (see progressRecordPrefix).
enum class ProgressStyle { kPlain, kLive, kRecords };

// Lines a worker writes in kRecords style start with this, then JSON:
// {"step", "total", "loss", "samples_per_sec", "worker_samples_per_sec"}.
inline constexpr const char* kProgressRecordPrefix = "@tandem-progress ";

class Progress {
 public:
  // kLive redraws one line; kPlain prints a line every `plain_interval_s`
  // seconds; kRecords writes a record at most every 0.2 s. Output goes to
  // `out` (stderr by default).
  Progress(int64_t first_step, int64_t total_steps, ProgressStyle style, double plain_interval_s = 10.0,
           std::FILE* out = stderr);

  // Cheap to call every step; prints only when due. Not thread-safe.
  void update(const ProgressSample& sample);
  // Prints a free-standing message without garbling the live line.
  void message(const std::string& text);
  // Ends the live line.
  void finish();
  // kRecords: writes the last update if its record was held back by the
  // 0.2 s limit, so that a launcher learns the step a failing worker reached.
  void flushRecord();

  static bool stderrIsTerminal();
  // "1h02m", "3m07s", "12s"
  static std::string formatDuration(double seconds);

 private:
  std::string render(const ProgressSample& sample) const;
  void write(const std::string& text);

  int64_t first_step_;
  int64_t total_steps_;
  ProgressStyle style_;
  double plain_interval_s_;
  std::FILE* out_;
  Stopwatch started_;
  double last_print_ = -1e9;
  bool line_open_ = false;
  std::optional<ProgressSample> unwritten_record_;
};

}  // namespace tandem::obs
