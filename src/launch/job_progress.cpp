#include "launch/job_progress.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "obs/progress.hpp"

namespace tandem::launch {

JobProgress::JobProgress(bool live, double plain_interval_s) : live_(live), plain_interval_s_(plain_interval_s) {}

std::optional<std::string> JobProgress::onLine(const std::string& child, std::string_view line) {
  const std::string_view prefix = obs::kProgressRecordPrefix;
  if (line.substr(0, prefix.size()) != prefix) return std::nullopt;
  const auto record = nlohmann::json::parse(line.substr(prefix.size()), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return std::nullopt;  // not ours after all: show it
  std::lock_guard lock(mu_);
  Worker& w = workers_[child];
  w.step = record.value("step", w.step);
  w.total = record.value("total", w.total);
  w.loss = record.value("loss", w.loss);
  w.samples_per_sec = record.value("worker_samples_per_sec", w.samples_per_sec);
  if (!first_step_) first_step_ = w.step;
  if (live_) return "";
  const double now = started_.elapsed();
  // The end once, when every worker heard from has got there.
  const bool all_finished = std::all_of(workers_.begin(), workers_.end(), [](const auto& entry) {
    return entry.second.total > 0 && entry.second.step >= entry.second.total;
  });
  const bool end_due = all_finished && !end_written_;
  if (now - last_plain_ < plain_interval_s_ && !end_due) return "";
  end_written_ = end_written_ || all_finished;
  last_plain_ = now;
  return "[launch] " + renderLocked();
}

std::optional<int64_t> JobProgress::latestStep() const {
  std::lock_guard lock(mu_);
  std::optional<int64_t> step;
  for (const auto& entry : workers_) step = std::max(step.value_or(entry.second.step), entry.second.step);
  return step;
}

void JobProgress::forget(const std::string& child) {
  std::lock_guard lock(mu_);
  workers_.erase(child);
}

void JobProgress::restart() {
  std::lock_guard lock(mu_);
  workers_.clear();
  first_step_.reset();
  started_ = Stopwatch();
  end_written_ = false;
}

std::string JobProgress::statusLine() const {
  std::lock_guard lock(mu_);
  return live_ && !workers_.empty() ? renderLocked() : "";
}

std::string JobProgress::render() const {
  std::lock_guard lock(mu_);
  return renderLocked();
}

std::string JobProgress::renderLocked() const {
  int64_t step = 0, total = 0;
  double rate = 0;
  const std::pair<const std::string, Worker>* slowest = nullptr;
  for (const auto& entry : workers_) {
    const Worker& w = entry.second;
    step = std::max(step, w.step);
    total = std::max(total, w.total);
    rate += w.samples_per_sec;
    if (slowest == nullptr || w.samples_per_sec < slowest->second.samples_per_sec) slowest = &entry;
  }
  const double elapsed = started_.elapsed();
  const int64_t done = step - first_step_.value_or(step);
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - step) : -1;
  const double percent = total > 0 ? 100.0 * static_cast<double>(step) / static_cast<double>(total) : 0;
  std::string line = fmt::format("job: step {}/{} ({:.0f}%) | {} worker(s) | {:.0f} samples/s | eta {}", step, total,
                                 percent, workers_.size(), rate, obs::Progress::formatDuration(eta));
  if (slowest != nullptr && workers_.size() > 1) {
    line += fmt::format(" | slowest: {} ({:.0f} samples/s)", slowest->first, slowest->second.samples_per_sec);
  }
  return line;
}

}  // namespace tandem::launch
