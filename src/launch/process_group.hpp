#pragma once
// Local child processes started together and stopped together: what
// `tandem launch` and `tandem bench allreduce` use to run a cluster on one
// host. Each child's stdout and stderr lines are relayed with a prefix
// ("[worker 1] ..."). When one child fails, the rest are stopped.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"
#include "launch/output_relay.hpp"
#include "launch/remote_task.hpp"

namespace tandem::launch {

struct ChildSpec {
  std::string name;               // "worker 0", "ps 1": prefix and error name
  std::vector<std::string> argv;  // argv[0] is the executable path
  std::vector<std::pair<std::string, std::string>> extra_env;  // added to the group's environment
  std::string label;  // the output's prefix when not the name ("worker 1@h2")
  // A task on another host: `argv` runs there, through ssh and an agent,
  // with the group's environment and `extra_env` sent along. ssh's stdin
  // is a socket that first carries the greeting; signals other than
  // SIGKILL travel on it as "signal N" lines (ssh would not pass them on).
  std::optional<RemoteTask> remote;
};

struct ChildExit {
  std::string name;
  pid_t pid = 0;
  int exit_code = 0;  // valid if !signaled
  bool signaled = false;
  int signal = 0;
  bool stopped_by_group = false;  // exited after the group stopped it for another child's failure
  std::string describe() const;  // "worker 1 (pid 123) exited with status 3" / "was killed by SIGKILL"
};

struct GroupResult {
  bool ok = true;                 // every child exited 0
  std::vector<ChildExit> exits;   // in the order they exited
  std::string first_failure;      // describe() of the first non-zero exit, "" if ok
};

// Not thread-safe. Forwarding signals is the caller's business: call
// signalAll() from the main loop when a SIGINT/SIGTERM flag is seen.
class ProcessGroup {
 public:
  // `environment`: what every child starts with (its entry point's, plus
  // what the job adds), before its own extra_env. `prefix_output`: relay
  // lines as "[name] line" to `output_fd` (our stdout by default; tests pass
  // a file). Else children inherit our fds.
  explicit ProcessGroup(Environment environment, bool prefix_output = true, int output_fd = 1);
  ~ProcessGroup();  // kills and reaps any child still running

  // What becomes of one relayed line (OutputRelay::LineHook). Runs on the
  // relay thread; set before start().
  using LineHook = OutputRelay::LineHook;
  void setLineHook(LineHook hook);
  // A line kept at the bottom of a terminal: redrawn after each batch of
  // relayed lines, erased before the next. Runs on the relay thread; set
  // before start().
  void setStatusLine(std::function<std::string()> status);

  // Throws Error naming the child if it cannot be started.
  void start(const ChildSpec& child);

  void signalAll(int signal);
  // Signals the running child called `name`, if any.
  void signal(const std::string& name, int signal);
  // The names of the children still running (not yet reaped).
  std::vector<std::string> running() const;

  // Waits for all children. When one exits non-zero (or by a signal), the
  // others get SIGTERM, then SIGKILL after `grace`. `poll_stop` is checked
  // every few ms; when it returns a signal number > 0 that signal is
  // forwarded to all children (used for SIGINT/SIGTERM forwarding); it
  // may start() more children.
  // `is_failure` decides which exits stop the rest (default: any non-zero
  // status or signal); e.g. 130 after a forwarded stop is no failure.
  // `replace`, asked about a child that failed while the group still runs:
  // true starts the child again in its place, from its spec as `replace`
  // leaves it (the same name, command and environment unless it amends
  // them), instead of stopping the rest; the exit is still listed.
  GroupResult wait(std::chrono::milliseconds grace, const std::function<int()>& poll_stop = {},
                   const std::function<bool(const ChildExit&)>& is_failure = {},
                   const std::function<bool(const ChildExit&, ChildSpec&)>& replace = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The executable `name` means, as a shell would find it in `env`'s PATH
// (a name with a slash: itself); empty when there is none.
std::string findExecutable(const std::string& name, const Environment& env);

// The path of the running executable (/proc/self/exe), for re-spawning.
std::string selfExecutable();

}  // namespace tandem::launch
