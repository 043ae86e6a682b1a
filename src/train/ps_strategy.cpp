#include "train/ps_strategy.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "ps/worker.hpp"
#include "train/chunked_parameters.hpp"
#include "train/ps_host_group.hpp"
#include "train/ps_pull_landing.hpp"
#include "train/ps_push_pipeline.hpp"
#include "train/ps_server_state.hpp"
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
  std::unique_ptr<PsPullLanding> pulls;    // the wire to the model
  // Priority scheduling: pulls may still be arriving when a step ends; the
  // trainer's awaitParameters takes them in, first chunks first.
  bool gated = false;
  SyncTimes parameter_waits;        // awaitParameters since the trainer last asked
  double gated_this_step = 0;       // seconds awaitParameters took since the step began
  int64_t pushes_pending_for = -1;  // gated: the step whose pushes nobody has awaited yet
  int64_t step = 0;
  int64_t max_lead = 0;
  Clock::time_point cycle_start = Clock::now();

  int n() const { return spec.num_workers; }
  ps::Worker& worker() const { return *link.worker; }

  // Gated: the last step's pushes, awaited before anything rewrites or
  // reads past them (the next backward, checkpoints, the end).
  void awaitGatedPushes() {
    if (pushes_pending_for < 0) return;
    Stopwatch watch;
    worker().awaitPushes(link.peerDeadline(), pushes_pending_for);
    pushes_pending_for = -1;
    parameter_waits.exposed_comm += watch.elapsed();
    gated_this_step += watch.elapsed();
  }
};

PsStrategy::PsStrategy(cluster::ClusterSpec spec, TrainConfig config, cluster::JobContext& context, bool joined)
    : impl_(std::make_unique<Impl>(context)) {
  impl_->joined = joined;
  impl_->spec = std::move(spec);
  impl_->config = std::move(config);
  impl_->mode = psModeOf(impl_->config.distributed);
  TANDEM_ENFORCE(impl_->config.distributed.local_steps == 0, "DiLoCo runs on DilocoStrategy");
}

// The pushes go first: their threads push through the connection's worker.
PsStrategy::~PsStrategy() { impl_->pushes.reset(); }

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
  return static_cast<int64_t>(s.pulls->receiveFinalModel(s.step, deadline).global_step);
}
nlohmann::json PsStrategy::summary() const {
  nlohmann::json s = impl_->link.summary();
  s["priority"] = impl_->gated;  // the next forward waits per stage
  s["max_lead_steps"] = impl_->max_lead;
  return s;
}

void PsStrategy::initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) {
  Impl& s = *impl_;
  s.link = connectToServers(model, fingerprint, plan, {s.spec, s.config, s.mode, s.context, s.joined, {}});
  s.pulls = std::make_unique<PsPullLanding>(s.link);
  s.step = s.link.step;
  s.pushes = std::make_unique<PsPushPipeline>(s.worker(), s.link.model, s.link.host.get(), s.link.shared_grads,
                                              /*from_autograd=*/true);
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

AgreedStep PsStrategy::synchronizeGradients(torch::nn::Module& model, const LocalStep& local) {
  Impl& s = *impl_;
  Stopwatch watch;
  // Compute only: the forward's waits for the last step's parameters are not.
  const double compute = std::max(0.0, secondsSince(s.cycle_start) - s.gated_this_step);
  s.gated_this_step = 0;
  s.pushes->drain(s.link.peerDeadline());
  ps::StepReport report{local.loss_sum / local.micro_steps, compute, local.stop_requested,
                        local.checkpoint_requested};
  // A lost server's replacement waits: sync, every worker takes it back
  // after this step; async and SSP, the live holders bring it up.
  if (s.spec.isChief() && s.mode == Mode::PsSync) {
    if (const std::optional<int> waiting = s.worker().replacementWaiting()) {
      report.rejoining_server = static_cast<uint32_t>(*waiting);
    }
  } else if (s.spec.isChief()) {
    s.worker().bringUpReplacement(s.link.peerDeadline());
  }
  const int64_t finished = s.step + 1;
  const Deadline deadline = s.link.peerDeadline();
  const ps::StepAgreement agreement = s.worker().reportStep(finished, report, deadline);
  if (agreement.rejoining_server != ps::kNoServer) {
    s.worker().takeBackServer(static_cast<int>(agreement.rejoining_server), finished, deadline);
  }
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
  s.pulls->expect();
  if (!s.gated) agreed.times.update = s.pulls->receive(deadline, s.step, s.link.layout.chunks.size());
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
  if (s.pulls->holds(end)) return;  // in already (always when ungated)
  Stopwatch watch;
  const double copying = s.pulls->receive(s.link.peerDeadline(), s.step - 1, end);
  s.parameter_waits.update += copying;
  s.parameter_waits.exposed_comm += std::max(0.0, watch.elapsed() - copying);
  s.gated_this_step += watch.elapsed();
}

SyncTimes PsStrategy::takeParameterWaits() { return std::exchange(impl_->parameter_waits, SyncTimes{}); }

std::optional<int64_t> PsStrategy::prepareCheckpoint(torch::optim::Optimizer& optimizer) {
  Impl& s = *impl_;
  awaitParameters();
  return fetchServerState(s.link,
                          {.mode = s.mode,
                           .step = s.step,
                           .pause_others = s.mode != Mode::PsSync,
                           .wire = s.config.distributed.wire_dtype,
                           .optimizer = &s.config.optimizer},
                          optimizer);
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
  if (s.link.worker && !s.worker().done()) s.worker().sayDone(s.link.peerDeadline());
  s.pushes.reset();  // nothing pushes any more
  s.link.hangUp();
}

}  // namespace tandem::train
