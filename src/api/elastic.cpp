// Horovod's elastic training over Tandem's live membership
// (train/live_membership.hpp): the ranks of a job started with `tandem
// launch --min-workers N` agree on the next members after a failed
// collective or a pending join, in-process, and connect again.
#include <fmt/format.h>

#include <string_view>

#include "api/job.hpp"
#include "cluster/cluster_spec.hpp"
#include "cluster/host_groups.hpp"
#include "cluster/quorum_messages.hpp"
#include "collective/host_communicator.hpp"
#include "core/error.hpp"
#include "tandem/tandem.hpp"

namespace tandem {
namespace api {

namespace {

// A count of workers launch hands an elastic program; 0 when unset.
int workerCount(const Environment& env, std::string_view name) {
  const auto text = lookupVariable(env, name);
  if (!text) return 0;
  const auto n = cluster::parseInteger(*text);
  if (!n || *n < 1 || *n > cluster::kMaxQuorumWorkers) {
    throw InputError(fmt::format("{}: '{}' is not a number of workers", name, *text));
  }
  return static_cast<int>(*n);
}

}  // namespace

int elasticMinWorkers(const Environment& env) { return workerCount(env, "TANDEM_MIN_WORKERS"); }

cluster::ClusterFlags launchedClusterFlags(const Environment& env) {
  cluster::ClusterFlags flags;
  if (const auto address = lookupVariable(env, "TANDEM_COORDINATOR")) {
    flags.coordinator = *address;
    flags.external_coordinator = true;
  }
  flags.max_workers = workerCount(env, "TANDEM_MAX_WORKERS");
  // launch --hosts --ps K: the last K of the launcher's ranks serve.
  flags.ps_tasks = workerCount(env, "TANDEM_PS_TASKS");
  return flags;
}

void connectGeneration(Job& job, const cluster::Membership& m) {
  job.comm_options.rank = job.live->rank();
  job.comm_options.size = job.live->size();
  job.gloo_store = std::make_unique<cluster::PrefixStore>(fmt::format("gloo-g{}", m.generation), *job.join.store);
  // The generation's hosts: a death may leave a host with one worker, a joiner bring one back.
  job.comm = collective::connectByHost(
      *job.gloo_store, job.comm_options,
      cluster::memberHostGroups(*job.join.store, m.workers, job.options.hierarchical, job.deadline()));
  job.comm_thread = std::make_unique<collective::CommThread>();
  ++job.generation;
  job.sync_root = m.source >= 0 ? *m.rankOf(m.source) : 0;
}

}  // namespace api

bool elastic_enabled() { return api::current() && api::current()->live != nullptr; }

bool elastic_hosts_updated() {
  api::Job& job = api::requireJob("elastic_hosts_updated");
  if (!job.live) return false;
  ++job.commits;
  // One rank's link may hear of the round before another's: the sum makes it every rank's answer.
  float pending = job.live->changePending() ? 1.0f : 0.0f;
  job.runNow([&] { job.comm->allreduceSum(&pending, 1); }, "agreement on a change of members");
  return pending > 0;
}

int elastic_sync_root() { return api::current() ? api::current()->sync_root : 0; }

void elastic_reset() {
  api::Job& job = api::requireJob("elastic_reset");
  if (!job.live) {
    throw InputError("tandem::elastic_reset: this job's membership is fixed; start it with tandem launch "
                     "--min-workers N for hvd.elastic to go on without a dead worker");
  }
  // Queued collectives fail at once on a broken communicator; closing it
  // then fails any peer still waiting on this rank, so that it comes too.
  job.comm_thread.reset();
  job.comm.reset();
  job.gloo_store.reset();
  {
    std::lock_guard<std::mutex> lock(job.servers_mutex);
    for (auto& [signature, abandon] : job.abandon_step) abandon();
  }
  api::connectGeneration(job, job.live->agree(job.commits, "hvd.elastic reset"));
}

}  // namespace tandem
