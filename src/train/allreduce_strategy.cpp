#include "train/allreduce_strategy.hpp"

#include <fmt/ranges.h>
#include "cluster/kv_store.hpp"

#include <algorithm>
#include <cstring>

#include "cluster/coordinator.hpp"
#include "cluster/job_start.hpp"
#include "cluster/host_groups.hpp"
#include "cluster/local_address.hpp"
#include "cluster/membership.hpp"
#include "collective/bucket_reducer.hpp"
#include "collective/comm_thread.hpp"
#include "collective/communicator.hpp"
#include "collective/host_communicator.hpp"
#include "obs/timeline.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/wire_dtype.hpp"
#include "core/logging.hpp"
#include "train/cluster_join.hpp"
#include "train/gradient_buckets.hpp"
#include "train/live_membership.hpp"
#include "train/module_broadcast.hpp"
#include "train/nccl_buckets.hpp"

namespace tandem::train {

namespace {

std::string hierarchyText(const std::vector<std::vector<int>>& groups) {
  return fmt::format(", summed within each of {} hosts first (--hierarchical auto)", groups.size());
}

}  // namespace

struct AllReduceStrategy::Impl {
  explicit Impl(cluster::JobContext& c) : context(c) {}
  cluster::JobContext& context;
  obs::Timeline* timeline = nullptr;  // the plan's
  cluster::ClusterSpec spec;
  DistributedConfig config;
  ClusterJoin join;
  std::unique_ptr<cluster::PrefixStore> gloo_store;
  std::unique_ptr<collective::Communicator> comm;
  std::unique_ptr<collective::BucketReducer> reducer;  // uses comm
  std::unique_ptr<cluster::PrefixStore> nccl_store;
  std::unique_ptr<NcclBuckets> nccl;  // GPU buckets summed in device memory; null: Gloo on the host
  // Declared after comm, reducer and nccl: destroyed first, so queued jobs never
  // outlive them.
  std::unique_ptr<collective::CommThread> comm_thread;
  std::string collective_text;         // how the buckets are summed, for the log and summary
  torch::Tensor host_tail;             // with NCCL: the step's metadata, summed by Gloo
  std::unique_ptr<GradientBuckets> buckets;
  std::vector<collective::CommHandle> handles;
  Clock::time_point cycle_start = Clock::now();
  LocalStep current;  // as of the last beforeBackward
  WireDtype wire = WireDtype::kFloat32;
  std::vector<std::vector<int>> host_groups;  // --hierarchical: workers by host; empty: flat
  size_t bucket_cap = 0;                      // bytes, as --bucket-mb resolved
  // The tail's compute-time slots: one per rank, for as many ranks as the
  // job may grow to, so that a change of members keeps its layout.
  int tail_ranks = 0;
  int rank = 0;
  int size = 1;
  // --min-workers: the quorum's side; null for a fixed membership.
  std::unique_ptr<LiveMembership> live;
  collective::CommunicatorOptions comm_options;  // as first connected; a new generation changes rank and size
  torch::nn::Module* model = nullptr;           // what a joiner copies, with the plan's optimizer
  torch::optim::Optimizer* optimizer = nullptr;
  bool live_wanted = false;          // set at initialize, before `live` exists
  int64_t steps_done = 0;            // updates this worker's replica holds
  bool change_after_update = false;  // some member heard of a pending change: meet after this step
  std::optional<MembershipChange> joined_change;  // a joiner's first generation, until the trainer takes it

  int n() const { return size; }
  int lossSlot() const { return tail_ranks; }
  int stopSlot() const { return tail_ranks + 1; }
  int pendingSlot() const { return tail_ranks + 2; }  // only with a live membership
  size_t tailFloats() const { return static_cast<size_t>(tail_ranks + (live_wanted ? 3 : 2)); }
  // The worker id at `r` in this generation.
  int workerAt(int r) const { return live ? live->current().workers[static_cast<size_t>(r)] : r; }
  Deadline waitDeadline() const { return Deadline::afterSeconds(config.peer_timeout_s + 5.0); }

  // Runs `job` on the communication thread and waits for it.
  void runNow(std::function<void()> job, const std::string& what) {
    comm_thread->submit(std::move(job)).wait(waitDeadline(), what);
  }

  // Sums one bucket across the workers, on the communication thread. The
  // last bucket's tail (times, loss, stop) stays float32 on any wire, so
  // what the step reports stays exact.
  void reduceBucket(size_t bucket, const torch::Tensor& flat) {
    buckets->awaitOnHost(bucket);
    const int64_t start = obs::Timeline::nowUs();
    const size_t tail = bucket + 1 == buckets->size() ? static_cast<size_t>(buckets->tail().numel()) : 0;
    const size_t bytes = reducer->reduce(bucket, flat.data_ptr<float>(), static_cast<size_t>(flat.numel()), tail);
    if (timeline != nullptr) {
      timeline->span(fmt::format("all-reduce bucket {}", bucket), obs::Lane::kComm, start, obs::Timeline::nowUs(),
                     {{"bytes", bytes}, {"wire", wireDtypeName(reducer->wire())}});
    }
  }

  // GPU workers: NCCL unless --gpu-collective gloo, or NCCL cannot serve
  // every worker (missing somewhere, or two workers on one GPU: NCCL takes
  // one rank a GPU). Every worker decides from the same gathered facts.
  bool chooseNccl(const torch::Device& device, const std::string& host) {
    const GpuCollective wanted = config.gpu_collective;
    if (wanted == GpuCollective::kGloo) {
      collective_text = fmt::format("copied from {} and summed by Gloo (--gpu-collective gloo)", device.str());
      return false;
    }
    struct Facts {
      uint64_t host = 0;
      int32_t gpu = 0;
      int32_t nccl = 0;
    };
    Fnv1a host_hash;
    host_hash.add(host.data(), host.size());
    const Facts mine{host_hash.value(), device.index(), collective::ncclStatus().loaded ? 1 : 0};
    std::vector<Facts> all(static_cast<size_t>(n()));
    runNow([&] { comm->allgather(&mine, all.data(), sizeof(Facts)); }, "exchange of GPU placements");
    std::string why;
    for (int r = 0; r < n() && why.empty(); ++r) {
      if (all[static_cast<size_t>(r)].nccl == 0) {
        why = fmt::format("{} has no NCCL ({})", cluster::taskName(cluster::Role::kWorker, r),
                          r == rank ? collective::ncclStatus().detail : "see its log");
      }
      for (int q = 0; q < r && why.empty(); ++q) {
        const Facts &a = all[static_cast<size_t>(q)], &b = all[static_cast<size_t>(r)];
        if (a.host == b.host && a.gpu == b.gpu) {
          why = fmt::format("{} and {} share GPU {} (NCCL takes one worker a GPU)",
                            cluster::taskName(cluster::Role::kWorker, q), cluster::taskName(cluster::Role::kWorker, r),
                            a.gpu);
        }
      }
    }
    if (why.empty()) return true;
    if (wanted == GpuCollective::kNccl) throw InputError(fmt::format("--gpu-collective nccl: {}; use gloo or auto", why));
    collective_text = fmt::format("copied from {} and summed by Gloo: {}", device.str(), why);
    return false;
  }

  // Worker 0's NCCL id through the job's store, then the communicator.
  void joinNccl(const torch::Device& device, Deadline deadline) {
    if (wire != WireDtype::kFloat32 && config.error_feedback) {
      throw InputError("--error-feedback with NCCL: not built; use --gpu-collective gloo, or drop --error-feedback");
    }
    nccl_store = std::make_unique<cluster::PrefixStore>("nccl", *join.store);
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.peer_timeout_s * 1000));
    runNow(
        [&] {
          const collective::NcclId id = collective::exchangeNcclId(*nccl_store, "id", spec.index,
                                                                   collective::makeNcclId, deadline);
          nccl = std::make_unique<NcclBuckets>(device, id,
                                               collective::NcclOptions{spec.index, n(), timeout, "the job's all-reduce"},
                                               wire);
        },
        "joining NCCL");
    host_tail = torch::zeros({static_cast<int64_t>(tailFloats())}, torch::kFloat32);
    collective_text = fmt::format("summed by NCCL {} on {} in {:.2f}s set-up", collective::ncclStatus().detail,
                                  device.str(), nccl->setupSeconds());
  }

  // The step's metadata floats: the last bucket's tail, or with NCCL their own.
  torch::Tensor tail() const { return nccl ? host_tail : buckets->tail(); }

  // The tail: [compute seconds per rank][mean loss][stop][a change of members
  // pending, or this worker leaving].
  void fillTail() {
    torch::Tensor tail = this->tail();
    float* t = tail.data_ptr<float>();
    std::fill(t, t + tail.numel(), 0.0f);
    t[rank] = static_cast<float>(secondsSince(cycle_start));
    t[lossSlot()] = static_cast<float>(current.loss_sum / (current.micro_steps * n()));
    t[stopSlot()] = current.stop_requested ? 1.0f : 0.0f;
    if (live) t[pendingSlot()] = live->changePending() || current.leave_requested ? 1.0f : 0.0f;
  }

  AgreedStep synchronize(torch::nn::Module& model, const LocalStep& local);
  void joinRunning(const collective::CommunicatorOptions& options);
  // The gradient buckets and their hooks; logs how the worker joined.
  void makeBuckets(torch::nn::Module& model, bool nccl, const Stopwatch& watch, int min_workers);

  // After a failed collective or at an agreed boundary: the quorum's next
  // generation, a communicator among its members, and the source's state
  // for whoever is behind. Every queued collective has ended first (the
  // first failure breaks the communicator, so the rest fail at once).
  MembershipChange changeMembers(const std::string& why, bool redo) {
    for (size_t b = 0; b < handles.size(); ++b) {
      try {
        handles[b].wait(waitDeadline(), fmt::format("all-reduce of gradient bucket {}", b));
      } catch (const std::exception&) {
        // the failure is why we are here
      }
    }
    MembershipChange change;
    change.workers_before = n();
    change.redo = redo;
    reducer.reset();
    comm.reset();  // its sockets close, which fails any peer still waiting on this worker
    connectGeneration(live->agree(steps_done, why), change);
    return change;
  }

  // A communicator among generation `m`'s members, and the source's state
  // for whoever is behind it (a joiner among them).
  void connectGeneration(const cluster::Membership& m, MembershipChange& change) {
    rank = live->rank();
    size = live->size();
    comm_options.rank = rank;
    comm_options.size = size;
    gloo_store = std::make_unique<cluster::PrefixStore>(fmt::format("gloo-g{}", m.generation), *join.store);
    // The generation's hosts: a death may leave a host with one worker, a joiner bring one back.
    host_groups = cluster::memberHostGroups(*join.store, m.workers, config.hierarchical, waitDeadline());
    comm = collective::connectByHost(*gloo_store, comm_options, host_groups);
    if (!host_groups.empty()) {
      TANDEM_LOG_INFO("{}: generation {} of {} workers{}", spec.taskName(), m.generation, size,
                      hierarchyText(host_groups));
    }
    reducer = std::make_unique<collective::BucketReducer>(*comm, wire, config.error_feedback);
    change.generation = m.generation;
    change.rank = rank;
    change.world = size;
    change.step = m.step;
    change.departed = m.departed;
    change.joined = m.joined;
    change.source = m.source;
    change.behind = m.healing;
    if (m.source >= 0) {
      const int source_rank = *m.rankOf(m.source);
      change.is_source = m.source == spec.index;
      change.broadcast = [this, source_rank](void* data, size_t bytes) {
        runNow([&] { comm->broadcast(data, bytes, source_rank); }, "copy of the job's state to a new member");
      };
      healFromSource(*model, optimizer, change.is_source, change.broadcast);
    }
    steps_done = m.step;
  }

  // A worker started into a running live job: taken in at the members'
  // next step boundary, with their state, not a checkpoint's.
  MembershipChange joinRunningJob() {
    const cluster::Membership& m = live->join();
    MembershipChange change;
    // The generation before: its members less those who came, plus those who went.
    change.workers_before = m.size() - static_cast<int>(m.joined.size()) + static_cast<int>(m.departed.size());
    connectGeneration(m, change);
    return change;
  }
};

namespace {

torch::Device firstTrainableDevice(torch::nn::Module& model) {
  for (const auto& p : model.parameters()) {
    if (p.requires_grad()) return p.device();
  }
  return torch::kCPU;
}

}  // namespace

AllReduceStrategy::AllReduceStrategy(cluster::ClusterSpec spec, DistributedConfig config, cluster::JobContext& context)
    : impl_(std::make_unique<Impl>(context)) {
  impl_->spec = std::move(spec);
  impl_->config = config;
  impl_->rank = impl_->spec.index;
  impl_->size = impl_->spec.num_workers;
  // Refused here, on every task alike, before anything joins.
  if (config.min_workers > 0 || config.max_workers > 0) quorumOptions(config, impl_->size);
}

AllReduceStrategy::~AllReduceStrategy() = default;

int AllReduceStrategy::rank() const { return impl_->rank; }
int AllReduceStrategy::worldSize() const { return impl_->size; }

void AllReduceStrategy::initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) {
  Impl& s = *impl_;
  s.timeline = plan.timeline;
  Stopwatch watch;
  s.wire = s.config.wire_dtype;
  nlohmann::json fp = fingerprint;
  // Workers must cut and encode the same buckets, or the sums mix values.
  fp["allreduce"] = {{"bucket_mb", s.config.bucket_mb}, {"wire_dtype", wireDtypeName(s.wire)},
                     {"error_feedback", s.config.error_feedback}, {"hierarchical", s.config.hierarchical},
                     {"gpu_collective", s.config.gpu_collective}};
  const bool live = wantsLiveMembership(s.config, s.n());
  // A live job's members go on from different steps than they started at.
  if (live) fp.erase("start_step");
  s.join = joinAsWorker(s.spec, s.config, fp, s.context);
  // Worker 0 can join only a store it does not serve (a fresh one holds no running job).
  // A worker beyond the list can only join: it waits for the job to run.
  if (s.spec.beyondList()) {
    LiveMembership::awaitRunning(*s.join.store, s.spec,
                                 Deadline::afterSeconds(cluster::startupSeconds(s.context.start(), s.config.rendezvous_timeout_s)));
  }
  const bool joining = live && LiveMembership::jobIsRunning(*s.join.store);
  const std::optional<cluster::QuorumOptions> quorum =
      live ? std::optional(quorumOptions(s.config, s.n())) : std::nullopt;
  s.live_wanted = live;
  s.tail_ranks = live ? quorum->max_workers : s.n();
  s.model = &model;
  s.optimizer = plan.optimizer;
  s.steps_done = plan.start_step;
  // Before any member can beat: they start after the first broadcast, which waits for the chief.
  if (live && !joining && s.spec.isChief()) {
    s.join.store->hostQuorum(s.n(), plan.start_step, *quorum,
                             Deadline::afterSeconds(cluster::startupSeconds(s.context.start(), s.config.rendezvous_timeout_s)));
  }

  collective::CommunicatorOptions options;
  options.rank = s.spec.index;
  options.size = s.n();
  options.local_host = cluster::ownWorkerHost(s.spec);
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(s.config.peer_timeout_s * 1000));
  const Deadline startup =
      Deadline::afterSeconds(cluster::startupSeconds(s.context.start(), s.config.rendezvous_timeout_s));
  // Published before this worker can be a member: each generation's members group by host from it.
  if (live && s.config.hierarchical == cluster::HostAggregation::kAuto) {
    cluster::publishWorkerAddress(*s.join.store, s.spec.index, options.local_host, startup);
  }
  if (joining) {
    s.joinRunning(options);
    return;
  }
  s.host_groups = cluster::hostGroupsFor(s.spec, s.config.hierarchical, *s.join.store, options.local_host, startup);
  s.comm_options = options;
  s.gloo_store = std::make_unique<cluster::PrefixStore>("gloo", *s.join.store);
  s.comm = collective::connectByHost(*s.gloo_store, options, s.host_groups);
  s.reducer = std::make_unique<collective::BucketReducer>(*s.comm, s.wire, s.config.error_feedback);
  s.comm_thread = std::make_unique<collective::CommThread>();
  broadcastModuleState(model, s.spec.index == 0, [&s](void* data, size_t bytes) {
    s.runNow([&] { s.comm->broadcast(data, bytes, 0); }, "broadcast of initial parameters");
  });

  const torch::Device device = firstTrainableDevice(model);
  s.collective_text = device.is_cpu() ? "summed by Gloo" : fmt::format("copied from {} and summed by Gloo", device.str());
  const bool nccl = device.is_cuda() && (s.n() > 1 || s.config.gpu_collective == GpuCollective::kNccl) &&
                    s.chooseNccl(device, options.local_host);
  if (nccl && live) {
    throw InputError("--min-workers with NCCL: not built; pass --gpu-collective gloo");
  }
  if (nccl) {
    s.joinNccl(device, startup);
  }
  if (live) {
    s.live = std::make_unique<LiveMembership>(s.spec, *quorum, *s.join.store, s.context.security());
    if (s.spec.isChief()) LiveMembership::markRunning(*s.join.store);
  }
  if (s.n() > 1 || nccl || live) s.makeBuckets(model, nccl, watch, live ? quorum->min_workers : 0);
  s.cycle_start = Clock::now();
}

// A worker (re)started into a running live job: no first broadcast, which
// the members are long past; it is taken in at their next step boundary.
void AllReduceStrategy::Impl::joinRunning(const collective::CommunicatorOptions& options) {
  Stopwatch watch;
  const cluster::QuorumOptions quorum = quorumOptions(config, spec.num_workers);
  const torch::Device device = firstTrainableDevice(*model);
  collective_text = device.is_cpu() ? "summed by Gloo" : fmt::format("copied from {} and summed by Gloo", device.str());
  comm_options = options;
  comm_thread = std::make_unique<collective::CommThread>();
  live = std::make_unique<LiveMembership>(spec, quorum, *join.store, context.security());
  joined_change = joinRunningJob();
  makeBuckets(*model, /*nccl=*/false, watch, quorum.min_workers);
  cycle_start = Clock::now();
}

void AllReduceStrategy::Impl::makeBuckets(torch::nn::Module& model, bool nccl, const Stopwatch& watch,
                                          int min_workers) {
  Impl& s = *this;
  s.bucket_cap = bucketCapBytes(model, s.config.bucket_mb);
  s.buckets = std::make_unique<GradientBuckets>(
      model, s.bucket_cap, nccl ? 0 : s.tailFloats(),
      [&s](size_t bucket, torch::Tensor flat) {
        if (s.nccl) {
          s.handles[bucket] = s.comm_thread->submit([&s, flat, produced = s.nccl->produced()] {
            s.nccl->reduce(flat, produced);
          });
          return;
        }
        s.handles[bucket] = s.comm_thread->submit([&s, flat, bucket] { s.reduceBucket(bucket, flat); });
      },
      [&s] { s.fillTail(); }, /*on_device=*/nccl);
  s.handles.resize(s.buckets->size());
  size_t bytes = 0;
  for (size_t b = 0; b < s.buckets->size(); ++b) bytes += s.buckets->bucketBytes(b);
  TANDEM_LOG_INFO("{}: joined {} workers via {} in {:.2f}s; {} gradient bucket(s), {:.1f} MB, {}{}{}{}",
                  s.spec.taskName(), s.n(), s.spec.source, watch.elapsed(), s.buckets->size(), bytes / 1e6,
                  s.collective_text, s.host_groups.empty() ? "" : hierarchyText(s.host_groups),
                  s.wire == WireDtype::kFloat32
                      ? ""
                      : fmt::format(", sent as {}{}", wireDtypeName(s.wire),
                                    s.config.error_feedback ? " with error feedback" : ""),
                  s.live ? fmt::format("; live membership: goes on with {} to {} workers", min_workers, s.tail_ranks)
                         : "");
}

std::optional<MembershipChange> AllReduceStrategy::takeJoinedMembership() {
  return std::exchange(impl_->joined_change, std::nullopt);
}

void AllReduceStrategy::beforeBackward(const LocalStep& so_far, int micro_step) {
  Impl& s = *impl_;
  s.current = so_far;
  if (!s.buckets) return;
  const bool last = micro_step + 1 == so_far.micro_steps;
  s.buckets->beginMicroStep(micro_step, last, 1.0 / (static_cast<double>(so_far.micro_steps) * s.n()));
}

AgreedStep AllReduceStrategy::synchronizeGradients(torch::nn::Module& model, const LocalStep& local) {
  Impl& s = *impl_;
  if (!s.live) return s.synchronize(model, local);
  try {
    AgreedStep agreed = s.synchronize(model, local);
    ++s.steps_done;
    return agreed;
  } catch (const PeerError& e) {
    AgreedStep redo;
    redo.membership = s.changeMembers(e.what(), /*redo=*/true);
    return redo;
  }
}

SyncTimes AllReduceStrategy::afterUpdate(torch::nn::Module& model, AgreedStep& agreed) {
  Impl& s = *impl_;
  if (!s.change_after_update) return {};
  s.change_after_update = false;
  // Asked to leave: the others meet without this worker, which ends here.
  if (s.current.leave_requested) s.live->leave(s.steps_done);
  agreed.membership = s.changeMembers("a change of members is pending", /*redo=*/false);
  return {};
}

AgreedStep AllReduceStrategy::Impl::synchronize(torch::nn::Module& model, const LocalStep& local) {
  Impl& s = *this;
  if (!s.buckets) {
    // One worker: nothing to exchange, so no copies either.
    AgreedStep agreed = averageMicroBatches(model, local);
    s.cycle_start = Clock::now();
    return agreed;
  }
  s.current = local;
  Stopwatch watch;
  s.buckets->flush();
  for (size_t b = 0; b < s.handles.size(); ++b) {
    s.handles[b].wait(s.waitDeadline(), fmt::format("all-reduce of gradient bucket {}", b));
  }
  if (s.nccl) {
    s.runNow([&s] { s.nccl->awaitAll("NCCL all-reduce of the gradient buckets"); }, "NCCL all-reduce");
    s.fillTail();
    s.runNow([&s] { s.comm->allreduceSum(s.host_tail.data_ptr<float>(), static_cast<size_t>(s.host_tail.numel())); },
             "all-reduce of the step's times and loss");
    s.nccl->computeWaits();
  }
  const double exposed = watch.elapsed();
  s.buckets->exposeGradients();

  const float* tail = s.tail().data_ptr<float>();
  const double mine = tail[s.rank];
  const double slowest = *std::max_element(tail, tail + s.n());
  AgreedStep agreed;
  // Peers that computed longer kept this worker waiting; the rest of the
  // wait is communication that backward did not hide.
  agreed.times.wait_workers = std::clamp(slowest - mine, 0.0, exposed);
  agreed.times.exposed_comm = exposed - agreed.times.wait_workers;
  agreed.loss = tail[s.lossSlot()];
  agreed.stop = tail[s.stopSlot()] > 0.5f;
  s.change_after_update = s.live && tail[s.pendingSlot()] > 0.5f;
  s.cycle_start = Clock::now();
  return agreed;
}

void AllReduceStrategy::verifyReplicas(torch::nn::Module& model, int64_t step) {
  Impl& s = *impl_;
  const uint64_t mine = parameterChecksum(model);
  std::vector<uint64_t> all(static_cast<size_t>(s.n()));
  try {
    s.runNow([&] { s.comm->allgather(&mine, all.data(), sizeof(mine)); }, "replica checksum exchange");
  } catch (const PeerError& e) {
    // A member died between steps. Abandoned, the communicator fails the
    // next step's all-reduce at once, and the survivors meet as after any
    // death. Used again instead, a live peer still waiting in this exchange
    // on this rank would wait out --peer-timeout while this rank waits on it
    // in the next step's sum (seen under load in CliHierarchical).
    if (!s.live) throw;
    s.comm->abandon();
    TANDEM_LOG_WARN("{}: replica check after step {} skipped: {}", s.spec.taskName(), step, e.what());
    return;
  }
  std::vector<std::string> diverged;
  for (int r = 1; r < s.n(); ++r) {
    if (all[static_cast<size_t>(r)] != all[0]) diverged.push_back(cluster::taskName(cluster::Role::kWorker, s.workerAt(r)));
  }
  if (!diverged.empty()) {
    throw Error(fmt::format("replicas diverged after step {}: {} hold parameters that differ from {}'s", step,
                            fmt::join(diverged, ", "), cluster::taskName(cluster::Role::kWorker, s.workerAt(0))));
  }
}

nlohmann::json AllReduceStrategy::summary() const {
  return {{"buckets", impl_->buckets ? impl_->buckets->size() : 0},
          {"bucket_cap_bytes", impl_->bucket_cap},
          {"collective", impl_->collective_text},
          {"nccl_setup_seconds", impl_->nccl ? nlohmann::json(impl_->nccl->setupSeconds()) : nlohmann::json()},
          {"hierarchical", !impl_->host_groups.empty()},
          {"membership", impl_->live ? nlohmann::json({{"generation", impl_->live->current().generation},
                                                       {"workers", impl_->live->current().workers}})
                                     : nlohmann::json()}};
}

void AllReduceStrategy::finish() {
  Impl& s = *impl_;
  if (!s.comm) return;
  try {
    s.runNow([&] { s.comm->barrier(); }, "final barrier");
  } catch (const PeerError& e) {
    // The run is over and saved: a member lost now costs nothing.
    if (!s.live) throw;
    TANDEM_LOG_WARN("{}: a worker was lost after the last step: {}", s.spec.taskName(), e.what());
  }
}

uint64_t parameterChecksum(const torch::nn::Module& model) {
  Fnv1a hash;
  for (const auto& p : model.parameters()) {
    auto c = p.detach().cpu().contiguous();
    hash.add(c.data_ptr(), c.numel() * c.element_size());
  }
  return hash.value();
}

}  // namespace tandem::train
