#include "cluster/cluster_spec.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "cluster/slurm.hpp"
#include "core/error.hpp"

namespace tandem::cluster {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int parsePort(std::string_view port, const std::string& text, const std::string& field) {
  bool digits = !port.empty() && port.size() <= 5 &&
                port.find_first_not_of("0123456789") == std::string_view::npos;
  auto value = digits ? parseInteger(port) : std::nullopt;
  if (!value || *value < 1 || *value > 65535) {
    throw InputError(fmt::format("{}: '{}' has a bad port '{}' (expected a number in 1..65535)", field, text,
                                 port));
  }
  return static_cast<int>(*value);
}

int envInt(const Environment& env, const std::string& name) {
  const std::string& text = env.at(name);
  auto value = parseInteger(text);
  if (!value || *value < std::numeric_limits<int>::min() || *value > std::numeric_limits<int>::max()) {
    throw InputError(fmt::format("{}: '{}' is not an integer", name, text));
  }
  return static_cast<int>(*value);
}

// The comma-separated host list of a flag; an empty item is a typo ("a,,b"),
// not something to skip silently, because it would shift every later rank.
std::vector<HostPort> parseHostList(const std::string& text, const std::string& flag) {
  std::vector<HostPort> hosts;
  size_t start = 0;
  int item = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string_view part = trim(std::string_view(text).substr(start, comma == std::string::npos ? std::string::npos
                                                                                              : comma - start));
    if (part.empty()) {
      throw InputError(fmt::format("{}: item {} of '{}' is empty", flag, item, text));
    }
    hosts.push_back(parseHostPort(std::string(part), flag));
    if (comma == std::string::npos) break;
    start = comma + 1;
    ++item;
  }
  return hosts;
}

// Two tasks on one address would fail later with an opaque "address in use".
void checkNoDuplicates(const ClusterSpec& spec, const std::string& where) {
  std::map<std::string, std::string> seen;
  auto check = [&](const std::vector<HostPort>& hosts, Role role) {
    for (size_t i = 0; i < hosts.size(); ++i) {
      std::string task = taskName(role, static_cast<int>(i));
      auto [it, inserted] = seen.emplace(hosts[i].str(), task);
      if (!inserted) {
        throw InputError(fmt::format("{}: {} is listed twice ({} and {})", where, hosts[i].str(), it->second, task));
      }
    }
  };
  check(spec.worker_hosts, Role::kWorker);
  check(spec.ps_hosts, Role::kPs);
}

void setCoordinator(ClusterSpec& spec, const ClusterFlags& flags) {
  if (!flags.coordinator.empty()) {
    spec.coordinator = parseHostPort(flags.coordinator, "--coordinator");
  } else {
    spec.coordinator = spec.worker_hosts.front();
  }
}

bool clusterFlagsGiven(const ClusterFlags& flags) {
  return !flags.ps_hosts.empty() || !flags.worker_hosts.empty() || !flags.job_name.empty() ||
         flags.task_index >= 0;
}

ClusterSpec fromFlags(const ClusterFlags& flags) {
  if (flags.worker_hosts.empty()) {
    const char* given = !flags.job_name.empty() ? "--job_name" : !flags.ps_hosts.empty() ? "--ps_hosts" : "--task_index";
    throw InputError(fmt::format("--worker_hosts is required with {}", given));
  }
  if (flags.job_name.empty()) {
    throw InputError("--job_name (worker or ps) is required with --worker_hosts");
  }
  if (flags.job_name != "worker" && flags.job_name != "ps") {
    throw InputError(fmt::format("--job_name: '{}' is not worker or ps", flags.job_name));
  }
  if (flags.task_index < 0) {
    throw InputError(fmt::format("--task_index is required with --job_name {}", flags.job_name));
  }

  ClusterSpec spec;
  spec.source = "flags";
  spec.worker_hosts = parseHostList(flags.worker_hosts, "--worker_hosts");
  if (!flags.ps_hosts.empty()) spec.ps_hosts = parseHostList(flags.ps_hosts, "--ps_hosts");
  spec.num_workers = static_cast<int>(spec.worker_hosts.size());
  spec.role = flags.job_name == "ps" ? Role::kPs : Role::kWorker;
  spec.index = flags.task_index;

  if (spec.role == Role::kPs && spec.ps_hosts.empty()) {
    throw InputError("--job_name ps needs --ps_hosts listing the parameter servers");
  }
  const auto& hosts = spec.role == Role::kPs ? spec.ps_hosts : spec.worker_hosts;
  // A growing job's worker may lie beyond the list, up to --max-workers.
  const bool grows_into = spec.role == Role::kWorker && spec.index < flags.max_workers;
  if (spec.index >= static_cast<int>(hosts.size()) && !grows_into) {
    throw InputError(fmt::format("--task_index {} is out of range: {} lists {} {} task(s){}", spec.index,
                                 spec.role == Role::kPs ? "--ps_hosts" : "--worker_hosts", hosts.size(),
                                 flags.job_name,
                                 spec.role == Role::kWorker && flags.max_workers > 0
                                     ? fmt::format(" and --max-workers is {}", flags.max_workers)
                                     : ""));
  }
  checkNoDuplicates(spec, "--worker_hosts/--ps_hosts");
  setCoordinator(spec, flags);
  return spec;
}

std::vector<HostPort> tfHostList(const nlohmann::json& cluster, const std::string& job) {
  std::vector<HostPort> hosts;
  auto it = cluster.find(job);
  if (it == cluster.end()) return hosts;
  std::string field = "TF_CONFIG cluster." + job;
  if (!it->is_array()) throw InputError(fmt::format("{}: expected a list of \"host:port\" strings", field));
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& item = (*it)[i];
    std::string item_field = fmt::format("{}[{}]", field, i);
    if (!item.is_string()) {
      throw InputError(fmt::format("{}: expected a \"host:port\" string, got {}", item_field, item.dump()));
    }
    hosts.push_back(parseHostPort(item.get<std::string>(), item_field));
  }
  return hosts;
}

ClusterSpec fromTfConfig(const std::string& text, const ClusterFlags& flags) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw InputError(fmt::format("TF_CONFIG: not valid JSON: {}", e.what()));
  }
  if (!config.is_object()) throw InputError("TF_CONFIG: expected a JSON object with \"cluster\" and \"task\"");
  auto cluster_it = config.find("cluster");
  if (cluster_it == config.end() || !cluster_it->is_object()) {
    throw InputError("TF_CONFIG cluster: missing or not an object");
  }
  const auto& cluster = *cluster_it;
  for (const auto& [job, value] : cluster.items()) {
    if (job != "chief" && job != "worker" && job != "ps") {
      throw InputError(fmt::format("TF_CONFIG cluster.{}: unknown job (expected chief, worker or ps)", job));
    }
  }
  auto task_it = config.find("task");
  if (task_it == config.end() || !task_it->is_object()) {
    throw InputError("TF_CONFIG task: missing or not an object");
  }
  const auto& task = *task_it;
  auto type_it = task.find("type");
  if (type_it == task.end() || !type_it->is_string()) {
    throw InputError("TF_CONFIG task.type: missing or not a string");
  }
  std::string type = type_it->get<std::string>();
  // TensorFlow treats a missing index as 0; so do we.
  long long task_index = 0;
  if (auto index_it = task.find("index"); index_it != task.end()) {
    if (!index_it->is_number_integer()) {
      throw InputError(fmt::format("TF_CONFIG task.index: {} is not an integer", index_it->dump()));
    }
    task_index = index_it->get<long long>();
  }

  std::vector<HostPort> chief = tfHostList(cluster, "chief");
  std::vector<HostPort> workers = tfHostList(cluster, "worker");
  if (chief.size() > 1) {
    throw InputError(fmt::format("TF_CONFIG cluster.chief: lists {} tasks; there is at most one chief", chief.size()));
  }

  ClusterSpec spec;
  spec.source = "TF_CONFIG";
  // The chief is worker rank 0; TF's "worker" tasks follow it.
  spec.worker_hosts = chief;
  spec.worker_hosts.insert(spec.worker_hosts.end(), workers.begin(), workers.end());
  spec.ps_hosts = tfHostList(cluster, "ps");
  spec.num_workers = static_cast<int>(spec.worker_hosts.size());
  if (spec.num_workers < 1) {
    throw InputError("TF_CONFIG cluster: lists no chief or worker tasks; at least one worker is needed");
  }

  // `room`: a growing job's workers may lie beyond the list, up to its maximum.
  auto checkIndex = [&](size_t count, const std::string& job, long long room = 0) {
    if (count == 0) {
      throw InputError(fmt::format("TF_CONFIG task.type: '{}' but cluster.{} is missing or empty", type, job));
    }
    if (task_index < 0 || task_index >= std::max(static_cast<long long>(count), room)) {
      throw InputError(fmt::format("TF_CONFIG task.index: {} is out of range: cluster.{} lists {} task(s){}",
                                   task_index, job, count,
                                   room > 0 ? fmt::format(" and the job grows to {} workers", flags.max_workers)
                                            : ""));
    }
  };
  if (type == "chief") {
    checkIndex(chief.size(), "chief");
    spec.role = Role::kWorker;
    spec.index = 0;
  } else if (type == "worker") {
    checkIndex(workers.size(), "worker", flags.max_workers - static_cast<long long>(chief.size()));
    spec.role = Role::kWorker;
    spec.index = static_cast<int>(task_index) + static_cast<int>(chief.size());
  } else if (type == "ps") {
    checkIndex(spec.ps_hosts.size(), "ps");
    spec.role = Role::kPs;
    spec.index = static_cast<int>(task_index);
  } else if (type == "evaluator") {
    // As in TensorFlow, one evaluator, and no member of cluster (TFJob leaves it out).
    if (task_index != 0) {
      throw InputError(fmt::format("TF_CONFIG task.index: {} for the evaluator; there is one evaluator, index 0",
                                   task_index));
    }
    spec.role = Role::kEvaluator;
    spec.index = 0;
  } else {
    throw InputError(fmt::format("TF_CONFIG task.type: '{}' is not chief, worker, ps or evaluator", type));
  }
  checkNoDuplicates(spec, "TF_CONFIG cluster");
  setCoordinator(spec, flags);
  return spec;
}

// Launchers give only rank and size; addresses come from the coordinator.
ClusterSpec fromLauncher(const std::string& source, int rank, const std::string& rank_var, int size,
                         const std::string& size_var, HostPort coordinator) {
  if (size < 1) throw InputError(fmt::format("{}: {} is not a valid world size (must be >= 1)", size_var, size));
  if (rank < 0) throw InputError(fmt::format("{}: {} is negative", rank_var, rank));
  if (rank >= size) {
    throw InputError(fmt::format("{}: rank {} is out of range for {}={}", rank_var, rank, size_var, size));
  }
  ClusterSpec spec;
  spec.source = source;
  spec.num_workers = size;
  spec.role = Role::kWorker;
  spec.index = rank;
  spec.coordinator = std::move(coordinator);
  return spec;
}

// The name other hosts reach this one by: the one a launcher placed the
// task under (`spec.own_host`), else Slurm's for its node, else the
// system's host name.
std::string ownHostName(const ClusterSpec& spec, const Environment& env) {
  if (!spec.own_host.empty()) return spec.own_host;
  if (auto node = lookupVariable(env, "SLURMD_NODENAME"); node && !trim(*node).empty()) return std::string(trim(*node));
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    throw InputError("--ps: this host has no name to publish for its server; pass --bind with an address");
  }
  return name;
}

// --ps K under a launcher: its last K tasks serve parameters. Task 0 stays
// worker 0, on the first node, where the coordinator's address points; a
// block distribution puts the servers on the last node(s). A server's
// address is known only once it binds, so it publishes it in the store.
void makeLastTasksServers(ClusterSpec& spec, int servers, const std::string& size_var, const Environment& env) {
  const int tasks = spec.num_workers;
  if (servers >= tasks) {
    throw InputError(fmt::format("--ps {}: {} is {}, which leaves no task to train; the step needs at least {} tasks "
                                 "({} server(s) and a worker)",
                                 servers, size_var, tasks, servers + 1, servers));
  }
  spec.num_workers = tasks - servers;
  spec.ps_hosts.assign(static_cast<size_t>(servers), HostPort{});
  spec.servers_published = true;
  if (spec.index >= spec.num_workers) {
    spec.role = Role::kPs;
    spec.index -= spec.num_workers;
    spec.ps_hosts[static_cast<size_t>(spec.index)] = {ownHostName(spec, env), 0};
  }
}

// Both or neither: one without the other means a broken launcher setup.
bool pairPresent(const Environment& env, const std::string& a, const std::string& b) {
  bool has_a = env.count(a) > 0;
  bool has_b = env.count(b) > 0;
  if (has_a != has_b) {
    throw InputError(fmt::format("{} is set but {} is not", has_a ? a : b, has_a ? b : a));
  }
  return has_a;
}

HostPort masterAddress(const Environment& env) {
  auto addr = lookupVariable(env, "MASTER_ADDR");
  auto port = lookupVariable(env, "MASTER_PORT");
  std::string host(trim(addr.value_or("")));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) throw InputError("MASTER_ADDR: empty host");
  std::string port_text(trim(port.value_or("")));
  return HostPort{host, parsePort(port_text, port_text, "MASTER_PORT")};
}

// mpirun and srun do not name a coordinator; it must come from the user.
HostPort launcherCoordinator(const ClusterFlags& flags, const Environment& env, const std::string& launcher) {
  if (!flags.coordinator.empty()) return parseHostPort(flags.coordinator, "--coordinator");
  if (pairPresent(env, "MASTER_ADDR", "MASTER_PORT")) return masterAddress(env);
  throw InputError(fmt::format(
      "--coordinator host:port is needed under {} (or set MASTER_ADDR and MASTER_PORT): it names where worker 0 "
      "runs the coordination store",
      launcher));
}

// torchrun's agent already serves its own store on MASTER_PORT (it sets
// TORCHELASTIC_USE_AGENT_STORE for its workers), so worker 0 takes the next
// port. Other torchrun-style launchers leave MASTER_PORT to us.
HostPort torchrunCoordinator(const ClusterFlags& flags, const Environment& env) {
  if (!flags.coordinator.empty()) return parseHostPort(flags.coordinator, "--coordinator");
  if (!env.count("MASTER_ADDR")) throw InputError("MASTER_ADDR is not set but RANK and WORLD_SIZE are");
  if (!env.count("MASTER_PORT")) throw InputError("MASTER_PORT is not set but RANK and WORLD_SIZE are");
  HostPort coordinator = masterAddress(env);
  if (env.count("TORCHELASTIC_USE_AGENT_STORE")) {
    if (coordinator.port == 65535) {
      throw InputError("MASTER_PORT: 65535 leaves no port for tandem's coordinator (it uses MASTER_PORT + 1 under "
                       "torchrun); pick a lower --master_port");
    }
    ++coordinator.port;
  }
  return coordinator;
}

}  // namespace

std::optional<long long> parseInteger(std::string_view text) {
  text = trim(text);
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string HostPort::str() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

HostPort parseHostPort(const std::string& text, const std::string& field) {
  std::string_view s = trim(text);
  if (s.empty()) throw InputError(fmt::format("{}: empty address (expected host:port)", field));
  std::string_view host;
  std::string_view port;
  if (s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      throw InputError(fmt::format("{}: '{}' is not [ipv6]:port", field, text));
    }
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) {
      throw InputError(fmt::format("{}: '{}' has no port (expected host:port)", field, text));
    }
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      throw InputError(fmt::format("{}: '{}' is ambiguous; write an IPv6 host in brackets, [host]:port", field, text));
    }
  }
  if (host.empty()) throw InputError(fmt::format("{}: '{}' has no host (expected host:port)", field, text));
  return HostPort{std::string(host), parsePort(port, text, field)};
}

std::string taskName(Role role, int index) {
  if (role == Role::kEvaluator) return "evaluator";
  return fmt::format("{} {}", role == Role::kPs ? "ps" : "worker", index);
}

std::string ClusterSpec::taskName() const { return cluster::taskName(role, index); }

static std::optional<ClusterSpec> resolveFromSources(const ClusterFlags& flags, const Environment& env) {
  // An empty TF_CONFIG is how scripts "unset" it; TensorFlow ignores it too.
  auto tf_config = lookupVariable(env, "TF_CONFIG");
  bool has_tf_config = tf_config && !trim(*tf_config).empty();
  bool has_flags = clusterFlagsGiven(flags);
  if (has_flags && has_tf_config) {
    throw InputError(
        "both cluster flags (--worker_hosts/--ps_hosts/--job_name/--task_index) and TF_CONFIG are set; "
        "give one or the other");
  }
  if ((has_flags || has_tf_config) && flags.ps_tasks > 0) {
    throw InputError(fmt::format("--ps {} applies under srun, mpirun or torchrun; with {} the server list says which "
                                 "tasks serve",
                                 flags.ps_tasks, has_flags ? "--ps-hosts/--worker-hosts" : "TF_CONFIG"));
  }
  if (has_flags) return fromFlags(flags);
  if (has_tf_config) return fromTfConfig(*tf_config, flags);

  // A launcher world of one is a standalone run: nothing to coordinate.
  auto launched = [&](const std::string& source, const std::string& rank_var, const std::string& size_var,
                      const std::function<HostPort()>& coordinator) -> std::optional<ClusterSpec> {
    const int rank = envInt(env, rank_var);
    const int size = envInt(env, size_var);
    // A bad rank or size is named before any missing coordinator.
    if (size < 1 || rank < 0 || rank >= size) return fromLauncher(source, rank, rank_var, size, size_var, {});
    if (size == 1 && flags.coordinator.empty() && flags.ps_tasks == 0) return std::nullopt;
    ClusterSpec spec = fromLauncher(source, rank, rank_var, size, size_var, {});
    if (auto host = lookupVariable(env, "TANDEM_HOST")) spec.own_host = std::string(trim(*host));
    if (flags.ps_tasks > 0) makeLastTasksServers(spec, flags.ps_tasks, size_var, env);
    spec.coordinator = coordinator();
    return spec;
  };
  if (pairPresent(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")) {
    return launched("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                    [&] { return launcherCoordinator(flags, env, "mpirun"); });
  }
  // Slurm sets SLURM_PROCID alone in a batch script without --ntasks, so only
  // the pair marks an srun task.
  if (env.count("SLURM_PROCID") && env.count("SLURM_NTASKS")) {
    return launched("slurm", "SLURM_PROCID", "SLURM_NTASKS", [&] {
      // The step's own variables find it (cluster/slurm.hpp) where nothing names it.
      if (flags.coordinator.empty() && !env.count("MASTER_ADDR") && !env.count("MASTER_PORT")) {
        return slurmCoordinator(env);
      }
      return launcherCoordinator(flags, env, "Slurm");
    });
  }
  if (pairPresent(env, "RANK", "WORLD_SIZE")) {
    return launched("torchrun", "RANK", "WORLD_SIZE", [&] { return torchrunCoordinator(flags, env); });
  }
  if (!flags.coordinator.empty()) {
    throw InputError(
        "--coordinator is given but no cluster is: pass --worker_hosts/--job_name/--task_index, set TF_CONFIG, "
        "or start under mpirun, srun or torchrun");
  }
  if (flags.ps_tasks > 0) {
    throw InputError(fmt::format("--ps {} makes servers of a launcher's tasks, but none started this one: run it "
                                 "under srun, mpirun or torchrun, or use `tandem launch --ps {}`",
                                 flags.ps_tasks, flags.ps_tasks));
  }
  return std::nullopt;
}

std::optional<ClusterSpec> resolveClusterSpec(const ClusterFlags& flags, const Environment& env) {
  std::optional<ClusterSpec> spec = resolveFromSources(flags, env);
  if (flags.external_coordinator) {
    if (flags.coordinator.empty()) {
      throw InputError("--external-coordinator needs --coordinator host:port: where the other process serves the store");
    }
    if (!spec) throw InputError("--external-coordinator: no cluster is given for it to coordinate");
    spec->coordinator_external = true;
  }
  return spec;
}

}  // namespace tandem::cluster
