#pragma once
// The evaluator's policy (TF_CONFIG task type "evaluator", as TFJob starts
// one): which of the chief's checkpoints to evaluate, and when the job is
// over. Pure: the caller looks at the run directory (lookAt) and hands over
// what it saw, so any order of writes can be replayed in a test. Torch-free.
#include <cstdint>
#include <filesystem>
#include <optional>

namespace tandem::train {

struct RunDirectoryView {
  // The chief's newest checkpoint (OUT/checkpoints/latest names it) and when it was written.
  std::optional<std::filesystem::path> latest;
  std::filesystem::file_time_type latest_written{};
  // OUT/summary.json, which the chief writes after its final checkpoint.
  std::optional<std::filesystem::file_time_type> summary_written;
};

// What the run directory holds now. Throws InputError if `latest` names a
// file outside OUT.
RunDirectoryView lookAt(const std::filesystem::path& out_dir);

class CheckpointWatch {
 public:
  enum class Action { kWait, kEvaluate, kEnd };
  // kEvaluate: `view.latest` is one not evaluated yet (a new file, or one
  // written again). kEnd: the chief is done (its summary is newer than its
  // newest checkpoint, so not a previous run's) and that checkpoint was
  // evaluated. Else kWait.
  Action next(const RunDirectoryView& view) const;
  // `view.latest` was evaluated.
  void evaluated(const RunDirectoryView& view);
  int64_t evaluations() const { return evaluations_; }

 private:
  std::optional<std::filesystem::path> last_;
  std::filesystem::file_time_type last_written_{};
  int64_t evaluations_ = 0;
};

}  // namespace tandem::train
