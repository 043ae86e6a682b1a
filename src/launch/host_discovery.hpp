#pragma once
// Horovod's host discovery, for a live all-reduce job that grows
// (--max-workers): a script the user gives prints the hosts with room for
// workers, one "host" or "host:slots" a line, and launch fills the slots
// on this host with workers that join the running job. Parsing and the
// choice of whom to start are pure; only runDiscoveryScript touches a
// process.
#include <chrono>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"

namespace tandem::launch {

struct DiscoveredHosts {
  int local_slots = 0;                   // on the hosts that name this machine
  std::vector<std::string> other_hosts;  // listed, but launch starts tasks here only
};

// One script's output. `local_names`: the names that mean this machine.
// Throws InputError naming the line for one that is not "host[:slots]"
// with slots 1 to 4096. A host listed twice counts once, its last slots.
DiscoveredHosts parseDiscoveredHosts(std::string_view output, const std::set<std::string>& local_names);

// The names this machine answers to: localhost, the loopback addresses,
// its host name and `launch_host` (launch --host).
std::set<std::string> localHostNames(const std::string& launch_host);

// Runs `script` in `env` and returns its standard output. Throws Error naming the
// script when it cannot start, exits non-zero, is killed, or runs past
// `timeout` (then it is killed).
std::string runDiscoveryScript(const std::string& script, const Environment& env, std::chrono::milliseconds timeout);

// The worker ids to start so that `running` grows to `slots` workers, at
// most `max_workers`: the lowest ids not running (a dead worker's id is
// taken again). Empty when the job already has as many.
std::vector<int> workersToStart(const std::set<int>& running, int slots, int max_workers);

// The worker ids to ask to leave so that `running` shrinks to `slots`
// workers, never below `min_workers`: the highest ids first.
std::vector<int> workersToLeave(const std::set<int>& running, int slots, int min_workers);

// What the script's latest answer asks of launch.
struct DiscoveryPlan {
  std::vector<int> start;  // workers to start, who join the running job
  std::vector<int> leave;  // workers to ask to leave it (SIGUSR2)
};

// Launch's side of it: asked between reaps, runs the script at most once
// a second and says which workers to start and which to ask to leave.
// What it cannot use (a failing script, another host) it names once on
// stderr.
class HostDiscovery {
 public:
  // `min_workers` 0: nobody is asked to leave (an elastic program, whose
  // workers cannot be told to).
  HostDiscovery(std::string script, Environment env, std::string launch_host, int min_workers, int max_workers);

  // Given the names of the running children ("worker 1", "ps 0"), each
  // announced. A worker asked to leave is not asked again, nor counted,
  // while it finishes its step.
  DiscoveryPlan plan(const std::vector<std::string>& running, std::chrono::steady_clock::time_point now);
  // Says `text` on stderr unless it was said before.
  void sayOnce(const std::string& text);

 private:
  std::string script_;
  Environment env_;  // the script sees what launch was given
  std::set<std::string> local_names_;
  int min_workers_;
  int max_workers_;
  std::set<int> leaving_;  // asked to leave, still running
  std::chrono::steady_clock::time_point next_{};
  std::set<std::string> said_;
};

}  // namespace tandem::launch
