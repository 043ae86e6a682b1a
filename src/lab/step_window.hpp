#pragma once
// A worker's steady state, read from its metrics.jsonl: the lab skips the
// first steps (connections, first touches of buffers) and measures the
// rest. Needs a train record per step (--log-every 1); the records carry
// wall-clock times, so the window can be matched against link counters
// sampled on the same clock.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>

namespace tandem::lab {

struct StepWindow {
  double begin_time = 0;  // unix seconds at the end of the last skipped step
  double end_time = 0;    // at the end of the last step
  int64_t steps = 0;      // this worker's steps inside the window
  nlohmann::json breakdown;  // mean seconds per phase over the window (as summary.json's step_breakdown)
  double stepSeconds() const { return steps > 0 ? (end_time - begin_time) / static_cast<double>(steps) : 0; }
};

// The steps after `warmup_steps`, up to `measure_steps` of them (0: to the
// run's end, whose last step may differ: streaming DiLoCo's exchanges the
// whole model). Throws InputError naming the file when it holds no
// per-step records or fewer than `warmup_steps` + 2 of them.
StepWindow steadyWindow(const std::filesystem::path& metrics, int64_t warmup_steps, int64_t measure_steps = 0);

}  // namespace tandem::lab
