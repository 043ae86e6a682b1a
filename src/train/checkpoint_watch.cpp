#include "train/checkpoint_watch.hpp"

#include "train/run_directory.hpp"

namespace tandem::train {
namespace fs = std::filesystem;

RunDirectoryView lookAt(const fs::path& out_dir) {
  RunDirectoryView view;
  std::error_code ec;
  // The summary first: one written after this look at `latest` is seen next time.
  if (const auto t = fs::last_write_time(out_dir / "summary.json", ec); !ec) view.summary_written = t;
  view.latest = latestCheckpoint(out_dir);
  if (view.latest) {
    view.latest_written = fs::last_write_time(*view.latest, ec);
    if (ec) view.latest.reset();  // replaced between the two looks: seen next time
  }
  return view;
}

CheckpointWatch::Action CheckpointWatch::next(const RunDirectoryView& view) const {
  if (!view.latest) return Action::kWait;  // the chief always ends with a checkpoint
  if (view.latest != last_ || view.latest_written != last_written_) return Action::kEvaluate;
  if (view.summary_written && *view.summary_written >= view.latest_written) return Action::kEnd;
  return Action::kWait;
}

void CheckpointWatch::evaluated(const RunDirectoryView& view) {
  last_ = view.latest;
  last_written_ = view.latest_written;
  ++evaluations_;
}

}  // namespace tandem::train
