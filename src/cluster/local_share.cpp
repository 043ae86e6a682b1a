#include "cluster/local_share.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/local_address.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"

namespace tandem::cluster {
namespace {

int positiveInt(std::string_view text, const std::string& name) {
  const auto value = parseInteger(text);
  if (!value || *value < 1 || *value > std::numeric_limits<int>::max()) {
    throw InputError(fmt::format("{}: '{}' is not a positive integer", name, text));
  }
  return static_cast<int>(*value);
}

// Slurm's compressed list, e.g. "2(x3),1": two tasks on each of the first
// three nodes, one on the fourth. Returns the count of node `node`.
int slurmTasksOnNode(const std::string& text, int node) {
  const std::string name = "SLURM_TASKS_PER_NODE";
  std::vector<int> per_node;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view item = std::string_view(text).substr(start, comma == std::string::npos ? std::string::npos
                                                                                           : comma - start);
    int repeat = 1;
    if (size_t paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')') throw InputError(fmt::format("{}: '{}' has a malformed repeat", name, text));
      repeat = positiveInt(item.substr(paren + 2, item.size() - paren - 3), name);
      item = item.substr(0, paren);
    }
    const int tasks = positiveInt(item, name);
    for (int i = 0; i < repeat && per_node.size() <= static_cast<size_t>(node); ++i) per_node.push_back(tasks);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (node < 0 || static_cast<size_t>(node) >= per_node.size()) {
    throw InputError(fmt::format("SLURM_NODEID: node {} is not covered by {}='{}'", node, name, text));
  }
  return per_node[static_cast<size_t>(node)];
}

}  // namespace

LocalProcesses countLocalProcesses(const std::optional<ClusterSpec>& spec, const Environment& env) {
  // An evaluator runs in a replica of its own (TFJob's Evaluator pod).
  if (spec && spec->role == Role::kEvaluator) return {1, "the evaluator", 1};
  if (spec && !spec->worker_hosts.empty()) {
    const bool server = spec->role == Role::kPs;
    const auto& own = server ? spec->ps_hosts : spec->worker_hosts;
    const std::string host = server ? own.at(static_cast<size_t>(spec->index)).host : ownWorkerHost(*spec);
    // A worker beyond the list of a growing job runs beside the listed ones.
    int count = spec->beyondList() ? 1 : 0;
    // A worker shares the cores with the other workers only: a server's
    // apply runs while the workers wait for its pulls, not during their
    // forward and backward.
    int job_tasks = count;
    for (const auto* hosts : {&spec->worker_hosts, &spec->ps_hosts}) {
      const int here = static_cast<int>(
          std::count_if(hosts->begin(), hosts->end(), [&host](const HostPort& h) { return h.host == host; }));
      job_tasks += here;
      if (server || hosts == &spec->worker_hosts) count += here;
    }
    return {count, spec->source, job_tasks};
  }
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                           "SLURM_NTASKS_PER_NODE"}) {
    if (auto it = env.find(name); it != env.end()) {
      const int count = positiveInt(it->second, name);
      return {count, name, count};
    }
  }
  if (auto it = env.find("SLURM_TASKS_PER_NODE"); it != env.end()) {
    int node = 0;
    if (auto id = env.find("SLURM_NODEID"); id != env.end()) {
      node = id->second == "0" ? 0 : positiveInt(id->second, "SLURM_NODEID");
    }
    const int count = slurmTasksOnNode(it->second, node);
    return {count, "SLURM_TASKS_PER_NODE", count};
  }
  return {1, spec ? spec->source : "standalone", 1};
}

std::string ThreadPlan::warning() const {
  if (!oversubscribed()) return "";
  return fmt::format(
      "{} local process(es) x {} thread(s) = {} threads on {} cores (threads from {}): the host is "
      "oversubscribed and every step will be slower; use --threads {} or fewer processes",
      local_processes, threads, local_processes * threads, cores, source, std::max(1, cores / local_processes));
}

ThreadPlan planThreads(int requested, const Environment& env, const LocalProcesses& local, int cores,
                       double busy_cores) {
  ThreadPlan plan;
  plan.local_processes = std::max(1, local.count);
  plan.cores = std::max(1, cores);
  if (requested > 0) {
    plan.threads = requested;
    plan.source = "--threads";
  } else if (auto it = env.find("OMP_NUM_THREADS"); it != env.end() && !it->second.empty()) {
    // OpenMP allows a nesting list ("4,2"); the outer level is ours.
    plan.threads = positiveInt(std::string_view(it->second).substr(0, it->second.find(',')), "OMP_NUM_THREADS");
    plan.source = "OMP_NUM_THREADS";
  } else {
    plan.busy_cores = std::clamp(static_cast<int>(std::lround(busy_cores)), 0, plan.cores - 1);
    plan.threads = std::max(1, (plan.cores - plan.busy_cores) / plan.local_processes);
    plan.source = plan.busy_cores > 0 ? "free cores / local processes" : "cores / local processes";
  }
  return plan;
}

std::optional<double> measureBusyCores(std::chrono::milliseconds window) {
  // The first line of /proc/stat sums every CPU: user nice system idle
  // iowait irq softirq steal ..., in clock ticks. Steal counts as busy: the
  // hypervisor gave that time to someone else.
  const auto sample = []() -> std::optional<std::pair<uint64_t, uint64_t>> {  // (idle, total)
    std::ifstream in("/proc/stat");
    std::string cpu;
    in >> cpu;
    if (cpu != "cpu") return std::nullopt;
    uint64_t idle = 0, total = 0, value = 0;
    for (int field = 0; field < 8 && in >> value; ++field) {
      total += value;
      if (field == 3 || field == 4) idle += value;
    }
    if (!in) return std::nullopt;
    return std::make_pair(idle, total);
  };
  const auto before = sample();
  std::this_thread::sleep_for(window);
  const auto after = sample();
  if (!before || !after || after->second <= before->second) return std::nullopt;
  const double total = static_cast<double>(after->second - before->second);
  const double idle = static_cast<double>(after->first - before->first);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp((total - idle) / total, 0.0, 1.0) * cores;
}

ThreadPlan planHostThreads(int requested, const Environment& env, const LocalProcesses& local) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto omp = env.find("OMP_NUM_THREADS");
  const bool share = requested <= 0 && (omp == env.end() || omp->second.empty());
  double busy = 0;
  if (share && local.job_tasks <= 1 && cores > 1) busy = measureBusyCores(std::chrono::milliseconds(100)).value_or(0);
  ThreadPlan plan = planThreads(requested, env, local, cores, busy);
  if (plan.oversubscribed()) TANDEM_LOG_WARN("{}", plan.warning());
  if (plan.busy_cores > 0) {
    TANDEM_LOG_INFO("{} of {} cores busy with other processes: {} thread(s) (--threads to choose)", plan.busy_cores,
                    plan.cores, plan.threads);
  }
  return plan;
}

}  // namespace tandem::cluster
