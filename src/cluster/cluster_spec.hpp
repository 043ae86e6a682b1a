#pragma once
// Who is in the cluster and which task this process is, resolved from one of
// the sources users already have: the classic PS/worker flags, TF_CONFIG, or
// the environment of mpirun, Slurm's srun or a torchrun-style launcher.
// Torch-free. Nothing here reads the process environment: the CLI captures
// it once and passes it in, so tests can build any environment they like.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"

namespace tandem::cluster {

// kEvaluator: TF_CONFIG's evaluator task (TFJob's Evaluator replica). It
// is no member of the training cluster: it evaluates the chief's newest
// checkpoints as they appear in the shared run directory.
enum class Role { kWorker, kPs, kEvaluator };

// "host:port" split and checked.
struct HostPort {
  std::string host;
  int port = 0;
  std::string str() const;  // "host:port"
  bool operator==(const HostPort&) const = default;
};

// Parses "host:port" (host non-empty, port 1..65535; "[v6]:port" accepted).
// Throws InputError naming `field` and the text.
HostPort parseHostPort(const std::string& text, const std::string& field);

struct ClusterSpec {
  // Worker addresses by rank when the source lists them (flags, TF_CONFIG);
  // empty for launcher environments, which give only rank and size.
  std::vector<HostPort> worker_hosts;
  std::vector<HostPort> ps_hosts;
  int num_workers = 1;
  Role role = Role::kWorker;
  int index = 0;              // task index within its role; a worker's rank
  HostPort coordinator;       // the coordination store: worker 0's, or another process's
  // Another process (tandem launch) serves the store, so that worker 0 may
  // die and the job go on; worker 0 only uses it.
  bool coordinator_external = false;
  std::string source;         // "flags", "TF_CONFIG", "mpirun", "slurm", "torchrun"
  // A launcher's tasks with --ps K: no address of a server is known ahead.
  // Each server binds a free port and publishes host:port in the
  // coordinator's store (cluster/server_addresses.hpp); `ps_hosts` holds
  // only this task's own host when it is a server (port 0), else blanks.
  bool servers_published = false;
  // A launcher's tasks: the host this task was placed on, as the others
  // reach it (TANDEM_HOST, from `tandem launch --hosts`); empty when the
  // spec lists addresses or nobody said.
  std::string own_host;

  int numServers() const { return static_cast<int>(ps_hosts.size()); }
  bool isChief() const { return role == Role::kWorker && index == 0; }
  // A worker beyond the listed ones (--max-workers): it joins a running
  // live job, and its own address is not in `worker_hosts`.
  bool beyondList() const {
    return role == Role::kWorker && !worker_hosts.empty() && index >= static_cast<int>(worker_hosts.size());
  }
  // Who serves the store, as errors name it: "worker 0" or "tandem launch".
  std::string coordinatorHost() const { return coordinator_external ? "tandem launch" : "worker 0"; }
  // "worker 1", "ps 0": how errors name a task.
  std::string taskName() const;
  bool operator==(const ClusterSpec&) const = default;
};

std::string taskName(Role role, int index);

// Flags of the classic launch lines; empty/negative means "not given".
struct ClusterFlags {
  std::string ps_hosts;      // --ps_hosts h:p,h:p
  std::string worker_hosts;  // --worker_hosts h:p,h:p
  std::string job_name;      // --job_name worker|ps
  int task_index = -1;       // --task_index / --task_id
  std::string coordinator;   // --coordinator h:p (needed by mpirun/slurm sources)
  bool external_coordinator = false;  // --external-coordinator: another process serves --coordinator
  // --max-workers: a worker's --task_index may lie beyond --worker_hosts,
  // up to this many workers (a job that grows while it runs).
  int max_workers = 0;
  // --ps K under srun, mpirun or torchrun: the last K tasks serve parameters.
  int ps_tasks = 0;
};

// Whole-string integer parse of a variable or field (surrounding blanks
// allowed); nullopt for anything else, e.g. "12abc", which from_chars alone
// would take as 12.
std::optional<long long> parseInteger(std::string_view text);

// Resolves the spec from the first source present, in this order: flags,
// TF_CONFIG, mpirun (OMPI_COMM_WORLD_RANK/SIZE), Slurm (SLURM_PROCID/NTASKS,
// coordinator from --coordinator), torchrun (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT; the coordinator takes MASTER_PORT + 1 when
// TORCHELASTIC_USE_AGENT_STORE says torchrun's own store holds MASTER_PORT).
// Returns nullopt when no source is present, or a launcher's world has one
// task and no --coordinator (both standalone).
// Throws InputError naming the field for a malformed spec (bad host:port,
// index out of range, unknown job name, bad JSON) or a contradictory one
// (e.g. both cluster flags and TF_CONFIG, RANK >= WORLD_SIZE).
std::optional<ClusterSpec> resolveClusterSpec(const ClusterFlags& flags, const Environment& env);

}  // namespace tandem::cluster
