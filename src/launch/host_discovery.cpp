#include "launch/host_discovery.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/clock.hpp"
#include "core/environment.hpp"
#include "core/error.hpp"
#include "launch/host_list.hpp"

namespace tandem::launch {
namespace {

constexpr size_t kMaxOutput = 64 * 1024;  // a host list, not a log

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

DiscoveredHosts parseDiscoveredHosts(std::string_view output, const std::set<std::string>& local_names) {
  std::map<std::string, int> slots;  // a host listed twice: its last line
  std::vector<std::string> order;
  int number = 0;
  while (!output.empty()) {
    const size_t end = output.find('\n');
    const std::string_view line = trimmed(output.substr(0, end));
    output.remove_prefix(end == std::string_view::npos ? output.size() : end + 1);
    ++number;
    if (line.empty() || line.front() == '#') continue;
    const std::optional<HostSlots> entry = parseHostSlots(line);
    if (!entry) {
      throw InputError(fmt::format("line {} of the discovery script's output, '{}': expected host or host:slots "
                                   "with slots 1 to {}",
                                   number, line, kMaxSlots));
    }
    const std::string& host = entry->host;
    if (!slots.contains(host)) order.push_back(host);
    slots[host] = entry->slots;
  }
  DiscoveredHosts found;
  for (const auto& host : order) {
    if (local_names.contains(host)) {
      found.local_slots += slots[host];
    } else {
      found.other_hosts.push_back(host);
    }
  }
  return found;
}

std::set<std::string> localHostNames(const std::string& launch_host) {
  std::set<std::string> names{"localhost", "127.0.0.1", "::1", launch_host};
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) names.insert(name);
  return names;
}

std::string runDiscoveryScript(const std::string& script, const Environment& env, std::chrono::milliseconds timeout) {
  int out[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) throw Error(fmt::format("discovery script {}: pipe failed", script));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  std::vector<char*> argv{const_cast<char*>(script.c_str()), nullptr};
  std::vector<std::string> entries = environmentEntries(env);
  std::vector<char*> envp;
  for (auto& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, script.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    throw Error(fmt::format("discovery script {}: cannot start it: {}", script, std::strerror(rc)));
  }
  std::string output;
  const auto deadline = Clock::now() + timeout;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the script closed its output
    if (output.size() < kMaxOutput) output.append(buffer, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    throw Error(fmt::format("discovery script {}: no answer within {} ms; killed", script, timeout.count()));
  }
  if (WIFSIGNALED(status)) {
    throw Error(fmt::format("discovery script {}: killed by signal {}", script, WTERMSIG(status)));
  }
  if (WEXITSTATUS(status) != 0) {
    throw Error(fmt::format("discovery script {}: exited with status {}", script, WEXITSTATUS(status)));
  }
  return output;
}

std::vector<int> workersToStart(const std::set<int>& running, int slots, int max_workers) {
  const int wanted = std::min(slots, max_workers);
  std::vector<int> start;
  for (int id = 0; static_cast<int>(running.size() + start.size()) < wanted && id < max_workers; ++id) {
    if (!running.contains(id)) start.push_back(id);
  }
  return start;
}

std::vector<int> workersToLeave(const std::set<int>& running, int slots, int min_workers) {
  const int wanted = std::max(slots, min_workers);
  std::vector<int> leave;
  for (auto it = running.rbegin(); it != running.rend() && static_cast<int>(running.size() - leave.size()) > wanted;
       ++it) {
    leave.push_back(*it);
  }
  return leave;
}

HostDiscovery::HostDiscovery(std::string script, Environment env, std::string launch_host, int min_workers,
                             int max_workers)
    : script_(std::move(script)),
      env_(std::move(env)),
      local_names_(localHostNames(launch_host)),
      min_workers_(min_workers),
      max_workers_(max_workers) {}

void HostDiscovery::sayOnce(const std::string& text) {
  if (said_.insert(text).second) std::fprintf(stderr, "launch: %s\n", text.c_str());
}

DiscoveryPlan HostDiscovery::plan(const std::vector<std::string>& running_names,
                                  std::chrono::steady_clock::time_point now) {
  std::set<int> running;
  for (const auto& name : running_names) {
    if (name.rfind("worker ", 0) == 0) running.insert(std::stoi(name.substr(7)));
  }
  // A worker asked to leave that has gone may be started again later.
  std::erase_if(leaving_, [&](int id) { return !running.contains(id); });
  if (now < next_) return {};
  next_ = now + std::chrono::seconds(1);
  DiscoveredHosts hosts;
  try {
    hosts = parseDiscoveredHosts(runDiscoveryScript(script_, env_, std::chrono::seconds(5)), local_names_);
  } catch (const Error& e) {
    sayOnce(fmt::format("{}; the job keeps its workers", e.what()));
    return {};
  }
  for (const auto& other : hosts.other_hosts) {
    sayOnce(fmt::format("the discovery script lists host {}: launch starts tasks on this host only", other));
  }
  std::set<int> staying = running;
  for (int id : leaving_) staying.erase(id);
  DiscoveryPlan plan;
  if (min_workers_ == 0 && hosts.local_slots < static_cast<int>(staying.size())) {
    sayOnce(fmt::format("the discovery script lists {} slot(s) for {} running workers: an elastic program's "
                        "workers are not asked to leave (not built)",
                        hosts.local_slots, staying.size()));
  }
  if (min_workers_ > 0) plan.leave = workersToLeave(staying, hosts.local_slots, min_workers_);
  if (hosts.local_slots < min_workers_ && static_cast<int>(staying.size()) > hosts.local_slots) {
    sayOnce(fmt::format("the discovery script lists {} slot(s), fewer than --min-workers {}: the job keeps {}",
                        hosts.local_slots, min_workers_, min_workers_));
  }
  for (int id : plan.leave) {
    leaving_.insert(id);
    std::fprintf(stderr, "launch: the discovery script lists %d slot(s) here: worker %d leaves the job at its next "
                 "step boundary\n", hosts.local_slots, id);
  }
  plan.start = launch::workersToStart(running, hosts.local_slots, max_workers_);
  for (int id : plan.start) {
    std::fprintf(stderr, "launch: the discovery script lists %d slot(s) here: worker %d starts and joins the running "
                 "job\n", hosts.local_slots, id);
  }
  return plan;
}

}  // namespace tandem::launch
