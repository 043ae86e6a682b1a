#pragma once
// What a lab run measured, beside what the planner says it should take:
// each worker's steady step and its breakdown, each host link's bytes per
// step, the comm-bound optimum and Tandem's predicted path. Times are
// undilated (divided by the dilation factor), i.e. those of the emulated
// cluster, not of this machine.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/training_mode.hpp"
#include "lab/link_sampler.hpp"
#include "lab/step_window.hpp"

namespace tandem::lab {

struct LabSetup {
  int worker_hosts = 1;
  int workers_per_host = 1;
  int servers = 0;
  bool dedicated_servers = false;
  bool hierarchical = false;  // summed per host first (--hierarchical auto)
  double link_bits_per_s = 1e9;  // the emulated link, undilated
  double dilation = 1;           // lab link = link / dilation; lab compute = compute * dilation
  double forward_s = 0;          // per worker step, undilated
  double backward_s = 0;
  double model_bytes = 0;        // exchanged per worker step
  double group_bytes = 0;        // bucket or chunk cap
  double message_s = 0;          // this machine's fixed cost per bucket or chunk message (undilated)
  double apply_bytes_per_s = 0;  // a server's apply rate (0: free)
  Mode mode = Mode::AllReduce;
  bool priority = false;         // sync PS whose next forward waits per stage (--priority on)
  int64_t local_steps = 1;       // DiLoCo: steps per exchange of the model (--local-steps)
  int64_t fragments = 1;         // streaming DiLoCo: --fragments
  int64_t fragment_delay = 0;    // streaming DiLoCo: steps each exchange overlaps (--fragment-delay)
};

struct WorkerResult {
  std::string name;  // "worker 0"
  StepWindow window;
  int64_t samples_per_step = 0;
};

// `links` holds each host's counters at worker 0's window ends (first
// then second).
nlohmann::json labReport(const LabSetup& setup, const std::vector<WorkerResult>& workers,
                         const std::vector<LinkCounters>& links_begin, const std::vector<LinkCounters>& links_end);

// The report as tables a reader takes in at a glance.
std::string labTable(const nlohmann::json& report);

}  // namespace tandem::lab
