#include "obs/progress.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <cmath>

namespace tandem::obs {

Progress::Progress(int64_t first_step, int64_t total_steps, ProgressStyle style, double plain_interval_s,
                   std::FILE* out)
    : first_step_(first_step),
      total_steps_(total_steps),
      style_(style),
      plain_interval_s_(plain_interval_s),
      out_(out) {}

bool Progress::stderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string Progress::formatDuration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string Progress::render(const ProgressSample& p) const {
  double elapsed = started_.elapsed();
  int64_t done = p.step - first_step_;
  int64_t left = total_steps_ - p.step;
  double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(left) : -1;
  double pct = total_steps_ > 0 ? 100.0 * static_cast<double>(p.step) / static_cast<double>(total_steps_) : 0;
  return fmt::format("step {}/{} ({:.0f}%) epoch {} loss {:.4f} lr {:.4g} {:.0f} samples/s elapsed {} eta {}",
                     p.step, total_steps_, pct, p.epoch, p.loss, p.lr, p.samples_per_sec,
                     formatDuration(elapsed), formatDuration(eta));
}

// A reader that went away (`tandem train 2>&1 | head`) must not end the run:
// failed writes are dropped (SIGPIPE is ignored in main).
void Progress::write(const std::string& text) {
  std::fputs(text.c_str(), out_);
  std::fflush(out_);
  std::clearerr(out_);
}

void Progress::update(const ProgressSample& sample) {
  double now = started_.elapsed();
  bool last = sample.step >= total_steps_;
  if (style_ == ProgressStyle::kRecords) {
    if (now - last_print_ < 0.2 && !last) {
      unwritten_record_ = sample;
      return;
    }
    unwritten_record_.reset();
    write(fmt::format("{}{{\"step\":{},\"total\":{},\"loss\":{},\"samples_per_sec\":{},"
                      "\"worker_samples_per_sec\":{}}}\n",
                      kProgressRecordPrefix, sample.step, total_steps_, std::isfinite(sample.loss) ? sample.loss : 0.0,
                      sample.samples_per_sec, sample.worker_samples_per_sec));
  } else if (style_ == ProgressStyle::kLive) {
    if (now - last_print_ < 0.2 && !last) return;
    write("\r\033[K" + render(sample));
    line_open_ = true;
  } else {
    if (now - last_print_ < plain_interval_s_ && !last) return;
    write(render(sample) + "\n");
  }
  last_print_ = now;
}

void Progress::message(const std::string& text) {
  if (line_open_) write("\r\033[K");
  write(text + "\n");
  line_open_ = false;
  last_print_ = -1e9;  // redraw the live line at the next update
}

void Progress::flushRecord() {
  if (!unwritten_record_) return;
  last_print_ = -1e9;
  update(*unwritten_record_);
}

void Progress::finish() {
  if (line_open_) {
    write("\n");
    line_open_ = false;
  }
}

}  // namespace tandem::obs
