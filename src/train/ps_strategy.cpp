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
#include "ps/worker.hpp"
#include "train/chunked_parameters.hpp"
#include "train/optimizer_state.hpp"
#include "train/ps_host_group.hpp"
#include "train/ps_push_pipeline.hpp"
#include "train/ps_setup.hpp"

namespace tandem::train {
struct PsStrategy::Impl {
  explicit Impl(cluster::JobContext& c) : context(c) {}
  cluster::JobContext& context;
  cluster::ClusterSpec spec;
  TrainConfig config;
  Mode mode = Mode::PsSync;
  bool joined = false;
  PsConnection link;                       // the layout, the model by chunk, the worker, the host-mates
  std::unique_ptr<PsPushPipeline> pushes;  // backward to the wire; null before initialize
  std::vector<float> pulled;               // hierarchical: the model as pulled, in key order
  // Priority scheduling: pulls may still be arriving when a step ends; the
  // trainer's awaitParameters takes them in, first chunks first.
  bool gated = false;
  SyncTimes parameter_waits;           // awaitParameters since the trainer last asked
  double gated_this_step = 0;          // seconds awaitParameters took since the step began
  int64_t pushes_pending_for = -1;     // gated: the step whose pushes nobody has awaited yet
  size_t received_upto = SIZE_MAX;     // gated: the last step's chunks before this one are in the model
  int64_t step = 0;
  std::function<int64_t(size_t)> chunk_clock;  // streaming DiLoCo: each chunk's start
  int64_t max_lead = 0;
  Clock::time_point cycle_start = Clock::now();

  int n() const { return spec.num_workers; }
  ps::Worker& worker() const { return *link.worker; }
  const ps::KeyLayout& layout() const { return link.layout; }
  Deadline peerDeadline() const { return Deadline::afterSeconds(config.distributed.peer_timeout_s + 5.0); }

  // Copies the pulled chunks before `end` into the model, first layers
  // first; returns the seconds spent copying. `pulled_for`: the step the
  // pulls answer (for the timeline).
  double receivePulls(Deadline deadline, int64_t pulled_for, size_t end = SIZE_MAX) {
    double copying = 0;
    worker().receivePulls(
        deadline, pulled_for,
        [&](size_t c, const ps::PulledValues& v) {
          Stopwatch copy;
          link.model.scatter(c, v.data, v.wire);
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
    worker().awaitPushes(peerDeadline(), pushes_pending_for);
    pushes_pending_for = -1;
    parameter_waits.exposed_comm += watch.elapsed();
    gated_this_step += watch.elapsed();
  }

  // Copies the last step's pulled chunks from received_upto to `end` into
  // the model and moves received_upto on; returns the seconds copying.
  // Hierarchical: the owners' pulls land in `pulled` and the host shares
  // them in whole groups, so that every host-mate runs the same shares in
  // the same order however its callers cut the model.
  double receiveUpTo(Deadline deadline, int64_t pulled_for, size_t end) {
    if (!link.host) {
      received_upto = end;
      return receivePulls(deadline, pulled_for, end);
    }
    const size_t from = received_upto;
    received_upto = link.host->shareEnd(end);
    worker().receivePulls(
        deadline, pulled_for,
        [&](size_t c, const ps::PulledValues& v) {
          decodeWire(v.wire, v.data, pulled.data() + layout().chunks[c].begin, v.count);
        },
        received_upto);
    link.host->share(pulled.data(), from, received_upto, deadline);
    Stopwatch copy;
    for (size_t c = from; c < received_upto; ++c) {
      link.model.scatter(c, pulled.data() + layout().chunks[c].begin, WireDtype::kFloat32);
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
}

PsStrategy::~PsStrategy() {
  Impl& s = *impl_;
  s.pushes.reset();  // its threads push through the worker
  // Failing out: tell the servers, briefly. A task that starts again in
  // place (--restart-wait) rejoins; in sync the others must start again too,
  // so their waits for this start fail at once, not at --peer-timeout.
  const bool rejoins = s.config.distributed.restart_wait_s > 0 && s.context.start().training;
  if (s.link.worker && !s.worker().done() && (!rejoins || s.mode == Mode::PsSync)) {
    try {
      rejoins ? s.worker().sayLeaving(Deadline::afterSeconds(1.0)) : s.worker().sayDone(Deadline::afterSeconds(1.0));
    } catch (const std::exception&) {
    }
  }
}

Mode PsStrategy::mode() const { return impl_->mode; }
int PsStrategy::rank() const { return impl_->spec.index; }
int PsStrategy::worldSize() const { return impl_->spec.num_workers; }
int PsStrategy::serverCount() const { return impl_->spec.numServers(); }
std::optional<RemoteParameters::Takeover> PsStrategy::takeover() const { return impl_->link.takeover; }

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
  const ps::StepAgreement agreement = s.worker().awaitWorkers(s.step, deadline);
  // Pulls answer once every push received before them is applied.
  s.worker().pullAll(0);
  s.receivePulls(deadline, s.step);
  return static_cast<int64_t>(agreement.global_step);
}
nlohmann::json PsStrategy::summary() const {
  const PsConnection& link = impl_->link;
  return {{"servers", impl_->spec.numServers()},
          {"chunks", link.layout.chunks.size()},
          {"hierarchical", !link.push_groups.empty()},
          {"priority", impl_->gated},  // the next forward waits per stage
          {"push_window_bytes", link.push_window},  // per server; 0: none
          {"shared_memory_servers", link.sharing_servers},
          {"parameters_in_shared_memory", link.parameters_in_arena},  // pulls land in the model
          {"max_lead_steps", impl_->max_lead}};
}

void PsStrategy::initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) {
  Impl& s = *impl_;
  s.link = connectToServers(model, fingerprint, plan, {s.spec, s.config, s.mode, s.context, s.joined, s.chunk_clock});
  if (s.link.host) s.pulled.assign(static_cast<size_t>(s.layout().total_floats), 0.0f);
  s.step = s.link.step;
  s.pushes = std::make_unique<PsPushPipeline>(s.worker(), s.link.model, s.link.host.get(), s.link.shared_grads,
                                              /*from_autograd=*/s.config.distributed.local_steps == 0);
  s.cycle_start = Clock::now();
}

void PsStrategy::beforeBackward(const LocalStep& so_far, int micro_step) {
  Impl& s = *impl_;
  awaitParameters();  // backward reads every weight and rewrites the pushed gradients
  const bool last = micro_step + 1 == so_far.micro_steps;
  // Sync: each worker's share of the mean. Otherwise every push is an update.
  const double workers = s.mode == Mode::PsSync ? s.n() : 1;
  const double micro_steps = so_far.sum_micro_steps ? 1 : static_cast<double>(so_far.micro_steps);
  s.pushes->beginMicroStep(s.step, micro_step, last, 1.0 / (micro_steps * workers));
}

void PsStrategy::offerOuterGradients(const std::vector<torch::Tensor>& outer) {
  Impl& s = *impl_;
  s.pushes->offer(s.step, outer, 1.0 / s.n());
}

void PsStrategy::streamFragments(std::function<int64_t(size_t)> chunk_clock) {
  impl_->chunk_clock = std::move(chunk_clock);
}

PsStrategy::Protocol PsStrategy::protocol() {
  Impl& s = *impl_;
  TANDEM_ENFORCE(s.link.worker != nullptr, "protocol() before initialize or after finish");
  return {s.worker(), s.link.model, s.peerDeadline()};
}

void PsStrategy::keepAlive() {
  if (impl_->link.worker) impl_->worker().sayAlive();
}

int64_t PsStrategy::ownBytes(const PushFormat& format) const {
  const Impl& s = *impl_;
  size_t bytes = 0;
  const PsHostGroup* host = s.link.host.get();
  for (const auto& c : s.layout().chunks) {
    const bool own = !host || ps::pusherRank(c.key, host->size()) == static_cast<size_t>(host->rank());
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
  s.pushes->drain(s.peerDeadline());
  const ps::StepReport report{local.loss_sum / local.micro_steps, compute, local.stop_requested,
                              local.checkpoint_requested};
  const int64_t finished = s.step + 1;
  const Deadline deadline = s.peerDeadline();
  const ps::StepAgreement agreement = s.worker().reportStep(finished, report, deadline);
  const double clock_wait = watch.elapsed();
  s.max_lead = std::max<int64_t>(s.max_lead, finished - agreement.slowest_clock);
  // Bounded staleness pulls only once ps 0 lets this worker go on, so that
  // it starts from the freshest values it is allowed.
  if (s.mode == Mode::Ssp) s.worker().pullAll(0);
  // Gated: the next backward, which rewrites the pushed gradients, waits
  // for the pushes instead, so the next forward may start before them.
  if (s.gated) {
    s.pushes_pending_for = s.step;
  } else {
    s.worker().awaitPushes(deadline, s.step);
  }
  AgreedStep agreed;
  // Gated: the next forward takes the pulls in as it reaches their layers.
  s.received_upto = 0;
  if (!s.gated) agreed.times.update = s.receiveUpTo(deadline, s.step, s.layout().chunks.size());
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
  if (!s.link.worker) return;
  if (count >= s.link.model.params().size()) s.awaitGatedPushes();  // everything the step sent is in
  const size_t end = s.link.model.chunksThrough(count);
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
    point = s.worker().holdForSnapshot(s.peerDeadline());
  }
  const int slots = optim::slotCount(s.config.optimizer);
  const std::vector<ps::FetchedState> chunks =
      s.worker().fetchState(s.mode == Mode::PsSync && !s.chunk_clock ? s.step : 0, slots, s.peerDeadline(),
                            point ? &*point : nullptr);
  if (point) s.worker().releaseSnapshot(s.peerDeadline());
  ChunkedParameters& model = s.link.model;
  // Torch tensors for every parameter's slots, filled chunk by chunk.
  std::vector<std::vector<torch::Tensor>> state(model.params().size());
  std::vector<int64_t> applied(model.params().size(), 0);
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (int k = 0; k < slots; ++k) state[p].push_back(torch::zeros_like(model.params()[p]));
  }
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ps::FetchedState& chunk = chunks[c];
    // The worker computes with the wire's rounding of the servers' float32
    // values (streaming DiLoCo: with its own); the checkpoint keeps the servers'. A
    // snapshot's values replace this worker's last pull too, so the checkpoint is all of one step.
    if (s.config.distributed.wire_dtype != WireDtype::kFloat32 || point || s.chunk_clock) {
      model.scatter(c, chunk.values().data(), WireDtype::kFloat32);
    }
    for (const auto& piece : model.pieces(c)) {
      applied[piece.param] = std::max<int64_t>(applied[piece.param], chunk.clock);
      for (int k = 0; k < slots; ++k) {
        std::memcpy(state[piece.param][static_cast<size_t>(k)].data_ptr<float>() + piece.param_offset,
                    chunk.slot(k).data() + piece.chunk_offset, static_cast<size_t>(piece.count) * sizeof(float));
      }
    }
  }
  const std::optional<int64_t> step =
      point && s.mode == Mode::PsAsync ? std::optional<int64_t>(point->global_step) : std::nullopt;
  if (slots == 0) return step;
  for (size_t p = 0; p < model.params().size(); ++p) {
    if (applied[p] == 0) continue;  // torch has no state before a parameter's first update
    writeKernelState(optimizer, model.trained()[p], s.config.optimizer, {std::move(state[p]), applied[p]});
  }
  return step;
}

void PsStrategy::setLearningRate(double lr) {
  Impl& s = *impl_;
  TANDEM_ENFORCE(s.link.worker != nullptr, "setLearningRate before initialize or after finish");
  // The rate applies to the pushes after it: none of the last step's may
  // still be queued behind the window.
  s.awaitGatedPushes();
  s.worker().setLearningRate(lr);
}

void PsStrategy::finish() {
  Impl& s = *impl_;
  awaitParameters();
  if (s.link.worker && !s.worker().done()) s.worker().sayDone(s.peerDeadline());
  s.pushes.reset();       // nothing pushes any more
  s.link.worker.reset();  // hang up at once: a server closes once its workers have
}

}  // namespace tandem::train
