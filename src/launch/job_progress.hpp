#pragma once
// One progress line for a whole local job: `tandem launch` has its workers
// write progress records (obs::ProgressStyle::kRecords) instead of each
// printing its own line, and folds them into the job's step, aggregate
// samples/s, ETA and slowest worker. Torch-free; thread-safe (the relay
// thread feeds it, the launcher's own thread forgets dead workers).
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.hpp"

namespace tandem::launch {

class JobProgress {
 public:
  // `live`: the line is redrawn on a terminal (statusLine()); otherwise a
  // plain line is written every `plain_interval_s` seconds and at the end.
  JobProgress(bool live, double plain_interval_s = 10.0);

  // A ProcessGroup line hook: consumes progress records ("" drops them, or a
  // plain line when one is due) and returns nullopt for every other line.
  std::optional<std::string> onLine(const std::string& child, std::string_view line);

  // The live line, or "" before the first record or when not live.
  std::string statusLine() const;

  // The furthest step any worker has reported; nullopt before the first record.
  std::optional<int64_t> latestStep() const;
  // A restarted job: forget the workers' records and the rates' start.
  void restart();
  // A worker whose process is gone while the job goes on: its last record
  // no longer counts (a replacement's records count again).
  void forget(const std::string& child);

  // "job: step 120/937 (13%) | 2 workers | 1850 samples/s | eta 1m02s | slowest: worker 1 (905 samples/s)"
  std::string render() const;

 private:
  std::string renderLocked() const;

  struct Worker {
    int64_t step = 0;
    int64_t total = 0;
    double loss = 0;
    double samples_per_sec = 0;  // its own
  };
  mutable std::mutex mu_;
  bool live_;
  double plain_interval_s_;
  std::map<std::string, Worker> workers_;
  Stopwatch started_;
  std::optional<int64_t> first_step_;
  double last_plain_ = -1e9;
  bool end_written_ = false;
};

}  // namespace tandem::launch
