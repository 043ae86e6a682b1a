#include "train/ps_strategy.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "cluster/job_start.hpp"
#include "collective/comm_thread.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/wire_dtype.hpp"
#include "ps/key_layout.hpp"
#include "ps/protocol.hpp"
#include "ps/worker.hpp"
#include "train/chunked_parameters.hpp"
#include "train/cluster_join.hpp"
#include "train/lr_schedule.hpp"
#include "train/gradient_capture.hpp"
#include "train/optimizer_state.hpp"
#include "train/ps_host_group.hpp"

namespace tandem::train {
struct PsStrategy::Impl {
  explicit Impl(cluster::JobContext& c) : context(c) {}
  cluster::JobContext& context;
  cluster::ClusterSpec spec;
  TrainConfig config;
  Mode mode = Mode::PsSync;
  ClusterJoin join;
  ps::KeyLayout layout;
  ChunkedParameters model;                    // trainable, registration order, by chunk
  // A GPU model: waits for each chunk's copy to the host and pushes it, off
  // autograd's thread, which goes on queuing backward.
  std::unique_ptr<collective::CommThread> stager;
  collective::CommHandle staged;  // the last chunk handed to the stager
  std::unique_ptr<GradientCapture> capture;   // flat gradients in key order; groups are the chunks
  std::unique_ptr<ps::Worker> worker;         // the protocol; null before initialize and after finish
  WireDtype wire = WireDtype::kFloat32;
  std::vector<std::vector<int>> push_groups;  // sync, hierarchical: workers by host; empty: flat
  std::unique_ptr<PsHostGroup> host;          // this worker's host-mates, when hierarchical
  size_t push_window = 0;                     // bytes per server (priority scheduling)
  int sharing_servers = 0;                    // servers that read and write this worker's shared memory
  bool parameters_in_arena = false;           // the model is those servers' pull landing area
  std::vector<float> pulled;                  // hierarchical: the model as pulled, in key order
  // Priority scheduling: pulls may still be arriving when a step ends; the
  // trainer's awaitParameters takes them in, first chunks first.
  bool gated = false;
  SyncTimes parameter_waits;           // awaitParameters since the trainer last asked
  double gated_this_step = 0;          // seconds awaitParameters took since the step began
  int64_t pushes_pending_for = -1;     // gated: the step whose pushes nobody has awaited yet
  size_t received_upto = SIZE_MAX;     // gated: the last step's chunks before this one are in the model
  int64_t step = 0;
  std::function<int64_t(size_t)> chunk_clock;  // streaming DiLoCo: each chunk's start
  std::optional<RemoteParameters::Takeover> takeover;  // a replacement in a running elastic job
  int64_t max_lead = 0;
  bool joined = false;
  Clock::time_point cycle_start = Clock::now();

  int n() const { return spec.num_workers; }
  Deadline peerDeadline() const { return Deadline::afterSeconds(config.distributed.peer_timeout_s + 5.0); }

  int serverOf(size_t chunk) const { return layout.chunks[chunk].server; }

  ps::ServerConfig serverConfig(int server, const StepPlan& plan) const {
    ps::ServerConfig c;
    c.mode = mode;
    c.staleness = std::max(0, config.distributed.staleness);
    c.workers = n();
    const auto& o = config.optimizer;
    c.optimizer = o;
    // The server holds the global step, so it looks the rate up itself.
    const double per_update = static_cast<double>(config.accumulate) * (mode == Mode::PsSync ? n() : 1);
    // Open-ended (total_steps 0): one rate; the APIs send theirs with ps-lr.
    const int64_t table_steps = std::max<int64_t>(1, plan.total_steps);
    LrSchedule schedule(config.optimizer, config.lr, plan.steps_per_epoch, table_steps, per_update);
    for (int64_t t = 0; t < table_steps; ++t) c.lr_by_step.push_back(schedule.at(t));
    c.layout_fingerprint = layout.fingerprint();
    for (const auto& chunk : layout.chunksOf(server)) c.chunks.push_back({chunk.key, chunk.length});
    c.peer_timeout_s = config.distributed.peer_timeout_s;
    c.start_step = static_cast<uint32_t>(plan.start_step);
    // Open-ended: async never stops the workers; they leave when done.
    c.total_steps = plan.total_steps > 0 ? static_cast<uint64_t>(plan.total_steps)
                                         : std::numeric_limits<uint32_t>::max();
    c.wire = wire;
    c.push_bits = config.distributed.push_bits;
    c.push_groups = push_groups;
    c.delay_compensation = config.distributed.delay_compensation;
    c.delay_form = config.distributed.delay_compensation_form;
    c.staleness_lr = config.distributed.staleness_lr == Switch::kOn;
    c.generation = context.start().generation, c.replaces = context.start().replaces;
    return c;
  }

  // Capture group `group` (chunk `chunk`) is complete on the autograd thread.
  void groupReady(size_t group, size_t chunk) {
    if (!stager) return chunkReady(chunk);
    staged = stager->submit([this, group, chunk] {
      capture->awaitOnHost(group);
      chunkReady(chunk);
    });
  }

  // Hierarchical: the host sums the chunk first; its owner pushes the sum.
  void chunkReady(size_t chunk) {
    if (!host) {
      push(chunk);
      return;
    }
    host->reduce(capture->flat().data_ptr<float>(), chunk, [this](size_t own) { push(own); });
  }

  // Zero-copy: the next backward rewrites these floats only after the
  // server answered a later request on the same connection. The worker
  // rounds them for a 16-bit wire.
  void push(size_t chunk) {
    worker->push(chunk, capture->flat().data_ptr<float>() + layout.chunks[chunk].begin, step);
  }

  // Copies the pulled chunks before `end` into the model, first layers
  // first; returns the seconds spent copying. `pulled_for`: the step the
  // pulls answer (for the timeline).
  double receivePulls(Deadline deadline, int64_t pulled_for, size_t end = SIZE_MAX) {
    double copying = 0;
    worker->receivePulls(
        deadline, pulled_for,
        [&](size_t c, const net::Frame& frame) {
          Stopwatch copy;
          model.scatter(c, frame.payload.data(), wire);  // the worker checked its size
          copying += copy.elapsed();
        },
        end);
    return copying;
  }

  // Gated: the last step's pushes, awaited before anything rewrites or
  // reads past them (the next backward, checkpoints, the end).
  void awaitGatedPushes() {
    if (pushes_pending_for < 0) return;
    Stopwatch watch;
    worker->awaitPushes(peerDeadline(), pushes_pending_for);
    pushes_pending_for = -1;
    parameter_waits.exposed_comm += watch.elapsed();
    gated_this_step += watch.elapsed();
  }

  // Same-host servers then write pulls straight into the model: each
  // parameter becomes a view of its place in the arena's landing area.
  // Safe because nothing reads a chunk's parameters between its pull's
  // request and its receipt: backward is done with them once their
  // gradients are pushed, and the next forward awaits them (receiveUpTo).
  void placeParametersInArena() {
    if (sharing_servers == 0 || wire != WireDtype::kFloat32 || host || model.staged() || chunk_clock) return;
    model.placeIn(arenaFloats(worker->pullLanding()));
    parameters_in_arena = true;
  }

  // The model's worth of float32 at `at` inside the worker's arena, as a
  // tensor that keeps the arena mapped.
  torch::Tensor arenaFloats(std::byte* at) const {
    return torch::from_blob(at, {layout.total_floats}, [arena = worker->sharedArena()](void*) {}, torch::kFloat32);
  }

  // Copies the last step's pulled chunks from received_upto to `end` into
  // the model and moves received_upto on; returns the seconds copying.
  // Hierarchical: the owners' pulls land in `pulled` and the host shares
  // them in whole groups, so that every host-mate runs the same shares in
  // the same order however its callers cut the model.
  double receiveUpTo(Deadline deadline, int64_t pulled_for, size_t end) {
    if (!host) {
      received_upto = end;
      return receivePulls(deadline, pulled_for, end);
    }
    const size_t from = received_upto;
    received_upto = host->shareEnd(end);
    worker->receivePulls(
        deadline, pulled_for,
        [&](size_t c, const net::Frame& frame) {
          decodeWire(wire, frame.payload.data(), pulled.data() + layout.chunks[c].begin,
                     static_cast<size_t>(layout.chunks[c].length));
        },
        received_upto);
    host->share(pulled.data(), from, received_upto, deadline);
    Stopwatch copy;
    for (size_t c = from; c < received_upto; ++c) {
      model.scatter(c, pulled.data() + layout.chunks[c].begin, WireDtype::kFloat32);
    }
    return copy.elapsed();
  }
};

PsStrategy::PsStrategy(cluster::ClusterSpec spec, TrainConfig config, cluster::JobContext& context, bool joined)
    : impl_(std::make_unique<Impl>(context)) {
  impl_->joined = joined;
  impl_->spec = std::move(spec);
  impl_->config = std::move(config);
  impl_->mode = psModeOf(impl_->config.distributed);
  impl_->wire = impl_->config.distributed.wire_dtype;
}

PsStrategy::~PsStrategy() {
  Impl& s = *impl_;
  s.stager.reset();   // its queued jobs (a failed step's) use the capture and the worker
  s.capture.reset();  // its hooks go with it
  // Failing out: tell the servers, briefly. A task that starts again in
  // place (--restart-wait) rejoins; in sync the others must start again too,
  // so their waits for this start fail at once, not at --peer-timeout.
  const bool rejoins = s.config.distributed.restart_wait_s > 0 && s.context.start().training;
  if (s.worker && !s.worker->done() && (!rejoins || s.mode == Mode::PsSync)) {
    try {
      rejoins ? s.worker->sayLeaving(Deadline::afterSeconds(1.0)) : s.worker->sayDone(Deadline::afterSeconds(1.0));
    } catch (const std::exception&) {
    }
  }
}

Mode PsStrategy::mode() const { return impl_->mode; }
int PsStrategy::rank() const { return impl_->spec.index; }
int PsStrategy::worldSize() const { return impl_->spec.num_workers; }
int PsStrategy::serverCount() const { return impl_->spec.numServers(); }
std::optional<RemoteParameters::Takeover> PsStrategy::takeover() const { return impl_->takeover; }

int64_t PsStrategy::awaitJobEnd(int64_t own_step) {
  Impl& s = *impl_;
  awaitParameters();
  if (s.mode == Mode::PsSync) return own_step;
  // The others have at most one granted step (async) or the staleness
  // bound's worth (SSP) to finish; a dead one is given up on by ps 0 after
  // --peer-timeout of silence.
  const int staleness = std::max(0, s.config.distributed.staleness);
  const Deadline deadline =
      Deadline::afterSeconds(s.config.distributed.peer_timeout_s * (2.0 + staleness) + 5.0);
  const ps::StepAgreement agreement = s.worker->awaitWorkers(s.step, deadline);
  // Pulls answer once every push received before them is applied.
  s.worker->pullAll(0);
  s.receivePulls(deadline, s.step);
  return static_cast<int64_t>(agreement.global_step);
}
nlohmann::json PsStrategy::summary() const {
  return {{"servers", impl_->spec.numServers()},
          {"chunks", impl_->layout.chunks.size()},
          {"hierarchical", !impl_->push_groups.empty()},
          {"priority", impl_->gated},  // the next forward waits per stage
          {"push_window_bytes", impl_->push_window},  // per server; 0: none
          {"shared_memory_servers", impl_->sharing_servers},
          {"parameters_in_shared_memory", impl_->parameters_in_arena},  // pulls land in the model
          {"max_lead_steps", impl_->max_lead}};
}

void PsStrategy::initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) {
  Impl& s = *impl_;
  std::vector<ps::TensorSpec> specs;
  std::vector<torch::Tensor> params;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (p.scalar_type() != torch::kFloat32 || !p.is_contiguous()) {
      throw Error(fmt::format("parameter {} is not a contiguous float32 tensor; the parameter server holds those only",
                              item.key()));
    }
    params.push_back(p);
    specs.push_back({item.key(), p.numel()});
  }
  // A model smaller than one chunk per server gets smaller chunks, so that
  // no server sits idle.
  int64_t total_floats = 0;
  for (const auto& t : specs) total_floats += t.numel;
  const auto requested = s.config.distributed.ps_chunk_mb > 0
                             ? static_cast<int64_t>(s.config.distributed.ps_chunk_mb * 1024 * 1024) / 4
                             : ps::autoPsChunkFloats(total_floats, s.spec.numServers());
  const int64_t chunk_floats = ps::chunkFloatsFor(total_floats, requested, s.spec.numServers());
  if (chunk_floats < requested && s.config.distributed.ps_chunk_mb > 0 && s.spec.isChief()) {
    TANDEM_LOG_INFO("{:.2f} MB of parameters over {} servers: chunks of {:.3f} MB instead of --ps-chunk-mb {}",
                    total_floats * 4 / 1e6, s.spec.numServers(), chunk_floats * 4 / 1e6,
                    s.config.distributed.ps_chunk_mb);
  }
  s.layout = ps::buildKeyLayout(specs, s.spec.numServers(), chunk_floats * 4);
  if (auto idle = ps::idleServers(s.layout); !idle.empty() && s.spec.isChief()) {
    TANDEM_LOG_WARN("ps {} hold(s) no parameters: the model has fewer floats ({}) than there are servers",
                    fmt::join(idle, ", "), total_floats);
  }
  s.model = ChunkedParameters(std::move(params), s.layout);
  if (s.model.staged()) s.stager = std::make_unique<collective::CommThread>();

  nlohmann::json fp = fingerprint;
  // Async and SSP jobs are elastic: a replacement for a lost worker joins
  // with the run directory's newest checkpoint, not the one the job started
  // from, and takes its step from ps 0 instead (hello).
  if (s.mode != Mode::PsSync) fp.erase("start_step");
  fp["ps"] = {{"mode", std::string(modeName(s.mode))},
              {"staleness", s.config.distributed.staleness},
              {"servers", s.spec.numServers()},
              {"chunk_bytes", chunk_floats * 4},
              {"wire_dtype", wireDtypeName(s.wire)},
              {"error_feedback", s.config.distributed.error_feedback},
              {"push_bits", s.config.distributed.push_bits},
              {"delay_compensation", s.config.distributed.delay_compensation},
              {"delay_compensation_form", s.config.distributed.delay_compensation_form},
              {"staleness_lr", s.config.distributed.staleness_lr},
              {"local_steps", s.config.distributed.local_steps},
              {"layout", fmt::format("{:016x}", s.layout.fingerprint())}};
  // Hierarchical aggregation needs the coordinator's store to meet host-mates.
  const auto groups = cluster::workersByHost(s.spec);
  if (s.mode == Mode::PsSync && !s.joined && cluster::useHostGroups(groups, s.config.distributed.hierarchical)) {
    s.push_groups = groups;
  }
  fp["ps"]["hierarchical"] = s.push_groups;
  Stopwatch watch;
  if (!s.joined) s.join = joinAsWorker(s.spec, s.config.distributed, fp, s.context);
  const auto mine = std::find_if(groups.begin(), groups.end(), [&](const std::vector<int>& g) {
    return std::find(g.begin(), g.end(), s.spec.index) != g.end();
  });
  // A worker alone on its host pushes every chunk itself, as in the flat layout.
  if (!s.push_groups.empty() && mine != groups.end() && mine->size() > 1) {
    std::vector<PsHostGroup::Range> ranges;
    for (const auto& chunk : s.layout.chunks) ranges.push_back({chunk.begin, chunk.length});
    s.host = std::make_unique<PsHostGroup>(*s.join.store, *mine, s.spec.index, s.config.distributed.peer_timeout_s,
                                           std::move(ranges), plan.timeline);
    s.pulled.assign(static_cast<size_t>(s.layout.total_floats), 0.0f);
  }

  std::vector<ps::ServerAddress> servers;
  for (int i = 0; i < s.spec.numServers(); ++i) {
    const auto& host = s.spec.ps_hosts[static_cast<size_t>(i)];
    // A server on loopback is on this host: its Unix socket skips TCP.
    const std::string endpoint =
        net::isLoopbackHost(host.host) ? net::sameHostEndpoint(host.port, s.context.security())
                                       : net::tcpEndpoint(host.host, host.port);
    servers.push_back({endpoint, cluster::taskName(cluster::Role::kPs, i)});
  }
  // Host-mates share this worker's link to a server, and so its window.
  const size_t pushers =
      mine == groups.end() ? 1 : ps::hostPushersPerServer(s.layout, *mine, s.spec.index, s.host != nullptr);
  s.push_window = s.config.distributed.priority == Switch::kOn ? ps::defaultPushWindow(s.layout, s.wire, pushers) : 0;
  ps::Liveness liveness;
  liveness.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(s.config.distributed.heartbeat_timeout_s * 1000));
  liveness.heartbeat_interval = std::min(liveness.heartbeat_interval, liveness.heartbeat_timeout / 4);
  s.worker = std::make_unique<ps::Worker>(
      ps::WorkerOptions{servers, s.layout, s.mode, static_cast<uint32_t>(s.spec.index), s.wire, s.push_window,
                        liveness, s.context.start().generation,
                        // Pushes from shared memory would copy from the device into pageable memory.
                        s.config.distributed.shared_memory == Switch::kOn && !s.model.staged(),
                        s.config.distributed.error_feedback, plan.timeline, s.config.distributed.push_bits},
      s.context.security());
  const Deadline startup =
      Deadline::afterSeconds(cluster::startupSeconds(s.context.start(), s.config.distributed.rendezvous_timeout_s));
  if (s.spec.isChief()) {
    std::vector<ps::ServerConfig> configs;
    for (int i = 0; i < s.spec.numServers(); ++i) configs.push_back(s.serverConfig(i, plan));
    s.worker->initServers(
        configs,
        [&](size_t c, int64_t& applied) {
          std::vector<float> values = s.model.gather(c);
          if (plan.start_step > 0 && plan.optimizer != nullptr) {
            // Sync: one update per step; async: one per global step; SSP: one per worker per step.
            const int64_t updates = plan.start_step * (s.mode == Mode::Ssp ? s.n() : 1);
            applied = s.model.appendOptimizerState(c, *plan.optimizer, s.config.optimizer, updates, values);
          }
          if (s.chunk_clock) applied = s.chunk_clock(c);
          return values;
        },
        startup);
  }
  const ps::HelloAnswer answer = s.worker->hello(startup);
  s.sharing_servers = s.worker->serversSharingMemory();
  s.placeParametersInArena();
  s.step = plan.start_step;
  if (s.mode != Mode::PsSync && (answer.clock != plan.start_step || answer.start_step != plan.start_step)) {
    s.takeover = Takeover{answer.start_step, answer.clock};
    s.step = answer.clock;
    TANDEM_LOG_WARN("{}: joined a running job in place of a lost worker {}: continuing its clock at step {} ({} "
                    "step(s) after the job's start at {})",
                    s.spec.taskName(), s.spec.index, answer.clock, answer.clock - answer.start_step,
                    answer.start_step);
  }
  if (!s.spec.isChief()) {
    s.worker->pullAll(s.mode == Mode::PsSync && !s.chunk_clock ? plan.start_step : 0);
    s.receivePulls(startup, plan.start_step);
  }

  std::vector<GradientCapture::Range> chunk_ranges;
  for (const auto& chunk : s.layout.chunks) chunk_ranges.push_back({chunk.begin, chunk.length});
  // Each chunk is pushed the moment its last gradient is in, in whatever
  // order backward completes them. Host-mates must sum chunks in one order:
  // last chunk first (backward's), strictly.
  const bool grouped = s.host != nullptr;
  if (grouped) std::reverse(chunk_ranges.begin(), chunk_ranges.end());
  const size_t last_chunk = chunk_ranges.size() - 1;
  Impl* self = &s;
  torch::Tensor shared_grads;  // where servers on this host read pushes: they carry a reference only
  if (s.sharing_servers > 0) shared_grads = s.arenaFloats(s.worker->sharedArena()->data());
  s.capture = std::make_unique<GradientCapture>(
      s.model.trained(), s.layout.tensor_offsets, s.layout.total_floats, chunk_ranges, /*in_order=*/grouped,
      [self, grouped, last_chunk](size_t group) { self->groupReady(group, grouped ? last_chunk - group : group); },
      shared_grads, s.model.transfer());
  if (s.config.distributed.local_steps > 0) s.capture->detachFromAutograd();
  TANDEM_LOG_INFO("{}: {} mode with {} server(s), {} chunk(s) of up to {:.1f} MB, {:.1f} MB of parameters{}{}; ready "
                  "in {:.2f}s", s.spec.taskName(), modeName(s.mode), s.spec.numServers(), s.layout.chunks.size(),
                  chunk_floats * 4 / 1e6, s.layout.total_floats * 4 / 1e6,
                  s.host ? fmt::format(", summed with {} host-mate(s) first (--hierarchical auto)", s.host->size() - 1)
                         : "",
                  s.sharing_servers > 0 ? fmt::format(", shared memory with {} server(s) here", s.sharing_servers) : "",
                  watch.elapsed());
  s.cycle_start = Clock::now();
}

void PsStrategy::beforeBackward(const LocalStep& so_far, int micro_step) {
  Impl& s = *impl_;
  awaitParameters();  // backward reads every weight and rewrites the pushed gradients
  const bool last = micro_step + 1 == so_far.micro_steps;
  // Sync: each worker's share of the mean. Otherwise every push is an update.
  const double workers = s.mode == Mode::PsSync ? s.n() : 1;
  const double micro_steps = so_far.sum_micro_steps ? 1 : static_cast<double>(so_far.micro_steps);
  s.capture->beginMicroStep(micro_step, last, 1.0 / (micro_steps * workers));
}

void PsStrategy::offerOuterGradients(const std::vector<torch::Tensor>& outer) {
  Impl& s = *impl_;
  enforceEq(outer.size(), s.model.trained().size(), "outer gradients per trainable parameter");
  s.capture->beginMicroStep(0, /*last=*/true, 1.0 / s.n());
  // Last first, as backward would: host-mates sum chunks in that order.
  for (size_t p = outer.size(); p-- > 0;) s.capture->offer(p, outer[p]);
}

void PsStrategy::streamFragments(std::function<int64_t(size_t)> chunk_clock) {
  impl_->chunk_clock = std::move(chunk_clock);
}

PsStrategy::Protocol PsStrategy::protocol() {
  Impl& s = *impl_;
  TANDEM_ENFORCE(s.worker != nullptr, "protocol() before initialize or after finish");
  return {*s.worker, s.model, s.peerDeadline()};
}

void PsStrategy::keepAlive() {
  if (impl_->worker) impl_->worker->sayAlive();
}

int64_t PsStrategy::ownBytes(const PushFormat& format) const {
  const Impl& s = *impl_;
  size_t bytes = 0;
  for (const auto& c : s.layout.chunks) {
    const bool own = !s.host || ps::pusherRank(c.key, s.host->size()) == static_cast<size_t>(s.host->rank());
    if (own) bytes += format.bytes(static_cast<size_t>(c.length));
  }
  return static_cast<int64_t>(bytes);
}

AgreedStep PsStrategy::synchronizeGradients(torch::nn::Module& model, const LocalStep& local) {
  Impl& s = *impl_;
  Stopwatch watch;
  // Compute only: the forward's waits for the last step's parameters are not.
  const double compute = std::max(0.0, secondsSince(s.cycle_start) - s.gated_this_step);
  s.gated_this_step = 0;
  s.capture->flush();  // parameters without a gradient this update push zeros
  if (s.stager) s.staged.wait(s.peerDeadline(), "gradient chunks' copies from the GPU and their pushes");
  if (s.host) s.host->awaitReduces(s.peerDeadline());
  const ps::StepReport report{local.loss_sum / local.micro_steps, compute, local.stop_requested,
                              local.checkpoint_requested};
  const int64_t finished = s.step + 1;
  const Deadline deadline = s.peerDeadline();
  const ps::StepAgreement agreement = s.worker->reportStep(finished, report, deadline);
  const double clock_wait = watch.elapsed();
  s.max_lead = std::max<int64_t>(s.max_lead, finished - agreement.slowest_clock);
  // Bounded staleness pulls only once ps 0 lets this worker go on, so that
  // it starts from the freshest values it is allowed.
  if (s.mode == Mode::Ssp) s.worker->pullAll(0);
  // Gated: the next backward, which rewrites the pushed gradients, waits
  // for the pushes instead, so the next forward may start before them.
  if (s.gated) {
    s.pushes_pending_for = s.step;
  } else {
    s.worker->awaitPushes(deadline, s.step);
  }
  AgreedStep agreed;
  // Gated: the next forward takes the pulls in as it reaches their layers.
  s.received_upto = 0;
  if (!s.gated) agreed.times.update = s.receiveUpTo(deadline, s.step, s.layout.chunks.size());
  const double total = watch.elapsed();
  if (s.mode == Mode::PsSync) {
    agreed.times.wait_workers = std::clamp(agreement.slowest_compute_seconds - compute, 0.0, clock_wait);
  } else if (s.mode == Mode::Ssp &&
             finished - static_cast<int64_t>(agreement.slowest_clock) >= s.config.distributed.staleness) {
    agreed.times.wait_workers = clock_wait;  // held at the staleness bound
  }
  agreed.times.exposed_comm = std::max(0.0, total - agreed.times.update - agreed.times.wait_workers);
  agreed.loss = agreement.loss;
  agreed.stop = agreement.stop;
  agreed.checkpoint = agreement.checkpoint;
  if (s.mode == Mode::PsAsync) {
    agreed.global_step = static_cast<int64_t>(agreement.global_step);
    agreed.finished = agreement.finished;
  }
  ++s.step;
  s.cycle_start = Clock::now();
  return agreed;
}

void PsStrategy::allowGatedParameters() {
  Impl& s = *impl_;
  s.gated = s.config.distributed.priority == Switch::kOn;
}

void PsStrategy::awaitParameters(size_t count) {
  Impl& s = *impl_;
  if (!s.worker) return;
  if (count >= s.model.params().size()) s.awaitGatedPushes();  // everything the step sent is in
  const size_t end = s.model.chunksThrough(count);
  if (end <= s.received_upto) return;  // in already (always when ungated)
  Stopwatch watch;
  const double copying = s.receiveUpTo(s.peerDeadline(), s.step - 1, end);
  s.parameter_waits.update += copying;
  s.parameter_waits.exposed_comm += std::max(0.0, watch.elapsed() - copying);
  s.gated_this_step += watch.elapsed();
}

SyncTimes PsStrategy::takeParameterWaits() { return std::exchange(impl_->parameter_waits, SyncTimes{}); }

std::optional<int64_t> PsStrategy::prepareCheckpoint(torch::optim::Optimizer& optimizer) {
  Impl& s = *impl_;
  awaitParameters();
  // Sync: the state after this worker's last step, before anyone's next.
  // Async and SSP: every other worker pauses at its next step boundary, and
  // each chunk is taken with exactly the pushes of the steps before it.
  // DiLoCo: the others may be a round from their next report; each chunk is taken as it is.
  std::optional<ps::SnapshotPoint> point;
  if (s.mode != Mode::PsSync && s.config.distributed.local_steps == 0) {
    point = s.worker->holdForSnapshot(s.peerDeadline());
  }
  const std::vector<net::Frame> frames =
      s.worker->fetchState(s.mode == Mode::PsSync && !s.chunk_clock ? s.step : 0, s.peerDeadline(),
                           point ? &*point : nullptr);
  if (point) s.worker->releaseSnapshot(s.peerDeadline());
  const int slots = optim::slotCount(s.config.optimizer);
  // Torch tensors for every parameter's slots, filled chunk by chunk.
  std::vector<std::vector<torch::Tensor>> state(s.model.params().size());
  std::vector<int64_t> applied(s.model.params().size(), 0);
  for (size_t p = 0; p < s.model.params().size(); ++p) {
    for (int k = 0; k < slots; ++k) state[p].push_back(torch::zeros_like(s.model.params()[p]));
  }
  for (size_t c = 0; c < s.layout.chunks.size(); ++c) {
    const net::Frame& frame = frames[c];
    const auto length = static_cast<size_t>(s.layout.chunks[c].length);
    if (frame.payload.size() != length * sizeof(float) * static_cast<size_t>(1 + slots)) {
      throw PeerError(fmt::format("ps {} sent {} bytes of state for chunk {}", s.serverOf(c), frame.payload.size(), c));
    }
    const auto* floats = static_cast<const float*>(frame.payload.data());
    // The worker computes with the wire's rounding of the servers' float32
    // values (streaming DiLoCo: with its own); the checkpoint keeps the servers'. A
    // snapshot's values replace this worker's last pull too, so the checkpoint is all of one step.
    if (s.wire != WireDtype::kFloat32 || point || s.chunk_clock) s.model.scatter(c, floats, WireDtype::kFloat32);
    for (const auto& piece : s.model.pieces(c)) {
      applied[piece.param] = std::max<int64_t>(applied[piece.param], frame.header.clock);
      for (int k = 0; k < slots; ++k) {
        std::memcpy(state[piece.param][static_cast<size_t>(k)].data_ptr<float>() + piece.param_offset,
                    floats + (static_cast<size_t>(k) + 1) * length + static_cast<size_t>(piece.chunk_offset),
                    static_cast<size_t>(piece.count) * sizeof(float));
      }
    }
  }
  const std::optional<int64_t> step =
      point && s.mode == Mode::PsAsync ? std::optional<int64_t>(point->global_step) : std::nullopt;
  if (slots == 0) return step;
  for (size_t p = 0; p < s.model.params().size(); ++p) {
    if (applied[p] == 0) continue;  // torch has no state before a parameter's first update
    writeKernelState(optimizer, s.model.trained()[p], s.config.optimizer, {std::move(state[p]), applied[p]});
  }
  return step;
}

void PsStrategy::setLearningRate(double lr) {
  Impl& s = *impl_;
  TANDEM_ENFORCE(s.worker != nullptr, "setLearningRate before initialize or after finish");
  // The rate applies to the pushes after it: none of the last step's may
  // still be queued behind the window.
  s.awaitGatedPushes();
  s.worker->setLearningRate(lr);
}

void PsStrategy::finish() {
  Impl& s = *impl_;
  awaitParameters();
  if (s.worker && !s.worker->done()) s.worker->sayDone(s.peerDeadline());
  s.worker.reset();  // hang up at once: a server closes once its workers have
}

}  // namespace tandem::train
