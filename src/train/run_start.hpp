#pragma once
// Where a run starts, from what --out holds: --overwrite clears it, the
// same run continues from its newest checkpoint, another run is refused.
// Every worker decides alike from the same directory; only the directory's
// owner (rank 0, unless it joined a running job) changes it.
#include <cstdint>
#include <string>

#include "train/config.hpp"

namespace tandem::train {

struct RunDirectoryPlan {
  std::string resume_from;  // "" for a fresh start
  bool automatic = false;   // found in --out rather than given with --resume
};

// Throws InputError naming the field when --out holds a different run, or
// a run record that is not one. `owner`: --overwrite clears --out here.
RunDirectoryPlan planRunDirectory(const TrainConfig& c, bool owner);

// The owner's claim on --out before it trains from `start_step`: drops
// checkpoints past it (an abandoned trajectory) and, for a run not found
// in --out, the final checkpoint and newest-checkpoint pointer it did not
// start from; then records this run's flags.
void claimRunDirectory(const TrainConfig& c, const RunDirectoryPlan& plan, int64_t start_step);

}  // namespace tandem::train
