#pragma once
// Streaming DiLoCo's timetable (Douillard et al. 2025), torch-free and pure.
// The model's chunks fall into F fragments, strided, so that each takes
// layers from the whole depth; chunk 0 is in the last fragment, the one
// exchanged at plain DiLoCo's round ends. Every --local-steps H
// steps each fragment is exchanged once, at staggered steps: fragment p
// after step offset(p) + k*H, so that an exchange starts every H/F steps
// and each carries 1/F of the model. An exchange started after step s is
// merged after step s + delay, the steps between overlapping it. The run's
// last step exchanges every fragment at once (after merging one still in
// flight), so every worker ends on the same global model.
#include <cstdint>
#include <optional>
#include <vector>

namespace tandem::train {

class FragmentSchedule {
 public:
  // Requires 1 <= fragments <= local_steps and 0 <= delay < local_steps / fragments.
  FragmentSchedule(int64_t local_steps, int fragments, int64_t delay);

  int fragments() const { return fragments_; }
  int64_t delay() const { return delay_; }
  // The first step after which fragment p is exchanged, in [1, H].
  int64_t offset(int p) const;
  // The fragment whose exchange starts after `step` (>= 1), if any; the
  // run's last step is not asked (it exchanges all).
  std::optional<int> startingAfter(int64_t step) const;
  // Exchanges of fragment p started after steps in [1, step].
  int64_t startsThrough(int p, int64_t step) const;
  // Steps (start, end]: the exchanges that start after one of them, every
  // fragment's together, excluding `end` itself (the last step's exchange
  // of all fragments is separate).
  int64_t startsBetween(int64_t start, int64_t end) const;
  // The fragment of chunk c: F - 1 - c % F.
  int fragmentOf(size_t c) const;
  // Chunks of fragment p among `chunks`, ascending.
  std::vector<size_t> chunksOf(int p, size_t chunks) const;

 private:
  int64_t h_;
  int fragments_;
  int64_t delay_;
};

// A run of streaming DiLoCo over steps (start, end], resumed at `start`
// from a run that ended there (its last step exchanged every fragment) or
// from a checkpoint taken right after a merge. Servers and workers number
// the exchanges alike from `start`, which is all the clocks need: after a
// mid-run checkpoint a chunk's count may run one ahead of its exchanges.
struct FragmentClocks {
  // Updates chunk c of fragment p has had at `start`: its servers' clock.
  static int64_t chunkAt(const FragmentSchedule& s, int p, int64_t start);
  // Exchanges ps 0 has counted at `start`, and after `end`: each
  // fragment's exchange is one report, and so is a last step's.
  static int64_t reportsAt(const FragmentSchedule& s, int64_t start);
  static int64_t reportsAfter(const FragmentSchedule& s, int64_t start, int64_t end);
};

}  // namespace tandem::train
