// The public API (include/tandem/tandem.hpp) over the trainer's own pieces:
// cluster resolution and rendezvous, the Gloo communicator and its thread,
// gradient buckets and the module broadcast.
#include "net/job_security.hpp"
#include "tandem/tandem.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include "cluster/kv_store.hpp"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "cluster/cluster_spec.hpp"
#include "cluster/host_groups.hpp"
#include "cluster/job_start.hpp"
#include "cluster/local_address.hpp"
#include "cluster/process_setup.hpp"
#include "cluster/server_addresses.hpp"
#include "collective/comm_thread.hpp"
#include "collective/communicator.hpp"
#include "collective/host_communicator.hpp"
#include "core/error.hpp"
#include "core/wire_dtype.hpp"
#include "api/job.hpp"
#include "core/fnv1a.hpp"
#include "train/module_broadcast.hpp"

namespace tandem {
namespace api {

// The process's job. A global, as Horovod's API requires; only the public
// functions touch it.
std::unique_ptr<Job>& current() {
  static std::unique_ptr<Job> job;
  return job;
}

cluster::JobContext& processContext() {
  static cluster::JobContext context(captureEnvironment());  // the APIs' entry point
  return context;
}

Job& requireJob(const char* call) {
  if (!current()) throw Error(fmt::format("tandem::{}: call tandem::init() first", call));
  return *current();
}

void requireAgreement(Job& job, const Group& group, uint64_t mine, const std::string& what) {
  std::vector<uint64_t> all(static_cast<size_t>(group.size));
  group.thread->submit([&] { group.comm->allgather(&mine, all.data(), sizeof(mine)); })
      .wait(job.deadline(), "agreement check of " + what);
  std::vector<int> differ;
  for (int r = 0; r < group.size; ++r) {
    if (all[static_cast<size_t>(r)] != all[0]) differ.push_back(group.members[static_cast<size_t>(r)]);
  }
  if (!differ.empty()) {
    throw InputError(fmt::format("tandem: rank(s) {} have {} different from rank {}'s; every rank must build the "
                                 "same model",
                                 fmt::join(differ, ", "), what, group.members.front()));
  }
}

}  // namespace api

using api::current;
using api::Job;
using api::requireJob;

namespace {

void shutdownAtExit() {
  try {
    shutdown();
  } catch (...) {
    // Exiting anyway: a peer that left first is no reason to crash.
  }
}

}  // namespace

void init(const InitOptions& options) {
  if (current()) throw Error("tandem::init: already initialised (call tandem::shutdown() first)");
  if (!(options.rendezvous_timeout_s > 0) || !(options.peer_timeout_s > 0) || !(options.bucket_mb >= 0)) {
    throw InputError("tandem::init: timeouts must be positive and bucket_mb must not be negative");
  }
  if (options.wire_dtype == WireDtype::kFloat32 && options.error_feedback) {
    throw InputError("tandem::init: error_feedback needs wire_dtype fp16 or bf16");
  }
  auto job = std::make_unique<Job>();
  job->options = options;
  const Environment& env = api::processContext().environment();
  const cluster::ClusterFlags launched = api::launchedClusterFlags(env);
  const cluster::ProcessSetup process = cluster::setUpProcess(launched, 0, env);
  cluster::requireWorkerTask(process, "tandem::init");
  job->spec = process.spec;
  job->local_size = process.local.count;
  job->local_rank = process.local.rank;
  // Each local worker takes its share of the free cores, as `tandem train` does.
  torch::set_num_threads(process.threads.threads);

  // Joined once a job has peers or servers; the communicator links workers.
  if (job->spec && (job->spec->num_workers > 1 || job->spec->numServers() > 0)) {
    api::processContext().setSecurity(net::resolveJobSecurity(options.secret_file, options.insecure, api::processContext().environment()));
    const cluster::ClusterSpec& spec = *job->spec;
    train::DistributedConfig config;
    config.rendezvous_timeout_s = options.rendezvous_timeout_s;
    config.peer_timeout_s = options.peer_timeout_s;
    config.min_workers = api::elasticMinWorkers(env);
    config.max_workers = launched.max_workers;
    const bool elastic = config.min_workers > 0 && spec.numServers() == 0;
    if (spec.beyondList() && !elastic) {
      throw InputError(fmt::format("{}: beyond the {} listed workers, only an elastic job (tandem launch "
                                   "--min-workers) can take it in", spec.taskName(), spec.num_workers));
    }
    const std::optional<cluster::QuorumOptions> quorum =
        elastic ? std::optional(train::quorumOptions(config, spec.num_workers)) : std::nullopt;
    job->join = train::joinAsWorker(spec, config,
                                    {{"api", "tandem C++"},
                                     {"workers", spec.num_workers},
                                     {"servers", spec.numServers()},
                                     {"hierarchical", options.hierarchical}},
                                    api::processContext());
    // Under a launcher's --ps K (launch --hosts), the servers published where they listen.
    if (spec.servers_published) {
      job->spec->ps_hosts = cluster::readServerAddresses(*job->join.store, spec.numServers(),
                                                         Deadline::afterSeconds(options.rendezvous_timeout_s));
      job->spec->servers_published = false;
    }
    collective::CommunicatorOptions comm;
    comm.rank = spec.index;
    comm.size = spec.num_workers;
    comm.local_host = cluster::ownWorkerHost(spec);
    comm.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.peer_timeout_s * 1000));
    job->comm_options = comm;
    // A worker beyond the list has no first start to take part in: it waits for the job to run.
    if (spec.beyondList()) {
      train::LiveMembership::awaitRunning(*job->join.store, spec, Deadline::afterSeconds(options.rendezvous_timeout_s));
    }
    const bool joining = elastic && train::LiveMembership::jobIsRunning(*job->join.store);
    // Before any member beats: they start after the first collective, which waits for the chief.
    if (elastic && !joining && spec.isChief()) {
      job->join.store->hostQuorum(spec.num_workers, 0, *quorum, Deadline::afterSeconds(options.rendezvous_timeout_s));
    }
    auto startLiveMembership = [&] {  // its heartbeat starts here
      job->live = std::make_unique<train::LiveMembership>(spec, *quorum, *job->join.store,
                                                          api::processContext().security());
    };
    // Published before this worker can be a member: each generation's members group by host from it.
    if (elastic && options.hierarchical == cluster::HostAggregation::kAuto) {
      cluster::publishWorkerAddress(*job->join.store, spec.index, comm.local_host,
                                    Deadline::afterSeconds(options.rendezvous_timeout_s));
    }
    if (joining) {
      // Started into the running job (a replacement): taken in at the members' next commit.
      startLiveMembership();
      api::connectGeneration(*job, job->live->join());
    } else if (spec.num_workers > 1) {
      job->gloo_store = std::make_unique<cluster::PrefixStore>("gloo", *job->join.store);
      const auto groups = cluster::hostGroupsFor(spec, options.hierarchical, *job->join.store, comm.local_host,
                                                 Deadline::afterSeconds(options.rendezvous_timeout_s));
      job->comm = collective::connectByHost(*job->gloo_store, comm, groups);
      job->comm_thread = std::make_unique<collective::CommThread>();
      // Horovod's cross ranks: the ranks that share this local_rank.
      std::vector<int32_t> locals(static_cast<size_t>(spec.num_workers));
      const int32_t mine = job->local_rank;
      job->runNow([&] { job->comm->allgather(&mine, locals.data(), sizeof(mine)); }, "exchange of local ranks");
      job->cross_size = static_cast<int>(std::count(locals.begin(), locals.end(), mine));
      job->cross_rank = static_cast<int>(std::count(locals.begin(), locals.begin() + spec.index, mine));
      if (elastic) {
        startLiveMembership();
        if (spec.isChief()) train::LiveMembership::markRunning(*job->join.store);
      }
    }
  }
  current() = std::move(job);
  static const bool registered = [] { return std::atexit(shutdownAtExit) == 0; }();
  (void)registered;
  // As Horovod: HOROVOD_TIMELINE=path records from the start; DYNAMIC waits
  // for start_timeline().
  const std::optional<std::string> timeline = lookupVariable(env, "HOROVOD_TIMELINE");
  if (timeline && !timeline->empty() && *timeline != "DYNAMIC") start_timeline(*timeline);
}

bool is_initialized() { return current() != nullptr; }

void shutdown() {
  if (!current()) return;
  std::unique_ptr<Job> job = std::move(current());
  // Nobody leaves while a peer may still be in a collective with it.
  if (job->comm) job->runNow([&] { job->comm->barrier(); }, "final barrier");
  api::stopTimeline(*job);
  // An init() after this one must not join the chief's store of this start,
  // which is about to close: it waits for the chief's next start.
  cluster::JobStart& start = api::processContext().start();
  if (job->spec && !job->spec->isChief()) start.replaces = start.generation;
}

int rank() { return requireJob("rank").rank(); }
int size() { return requireJob("size").size(); }
int local_rank() { return requireJob("local_rank").local_rank; }
int local_size() { return requireJob("local_size").local_size; }

void broadcast_parameters(torch::nn::Module& module, int root_rank) {
  std::vector<torch::Tensor> tensors = module.parameters();
  for (auto& b : module.buffers()) tensors.push_back(b);
  broadcast_parameters(tensors, root_rank);
}

void broadcast_parameters(const std::vector<torch::Tensor>& tensors, int root_rank) {
  Job& job = requireJob("broadcast_parameters");
  if (root_rank < 0 || root_rank >= job.size()) {
    throw InputError(fmt::format("tandem::broadcast_parameters: root rank {} outside 0..{}", root_rank, job.size() - 1));
  }
  if (job.size() == 1) return;
  Fnv1a shapes;
  for (const auto& t : tensors) {
    shapes.addValue(static_cast<int>(t.scalar_type()));
    for (int64_t d : t.sizes()) shapes.addValue(d);
    shapes.addValue(int64_t{-1});
  }
  api::requireAgreement(job, api::wholeJob(job), shapes.value(), "tensor counts, dtypes or shapes");
  train::broadcastTensors(tensors, job.rank() == root_rank, [&](void* data, size_t bytes) {
    job.runNow([&] { job.comm->broadcast(data, bytes, root_rank); }, "broadcast of parameters");
  });
}

}  // namespace tandem
