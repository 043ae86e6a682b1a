#include "train/diloco_strategy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/push_format.hpp"
#include "core/wire_dtype.hpp"
#include "ps/worker.hpp"
#include "train/checkpoint.hpp"
#include "train/ps_server_state.hpp"
#include "train/run_directory.hpp"

namespace tandem::train {
namespace {

// The run as the servers see it: their optimizer is the outer one, at one
// constant rate, and each round is one of their steps.
TrainConfig outerRunOf(TrainConfig c) {
  c.optimizer = outerOptimizerOf(c.distributed);
  c.lr = LrScheduleConfig{};
  c.accumulate = 1;
  // Streaming pushes fragments from every worker itself.
  if (streamsFragments(c.distributed)) c.distributed.hierarchical = cluster::HostAggregation::kOff;
  return c;
}

}  // namespace

OptimizerConfig outerOptimizerOf(const DistributedConfig& d) {
  OptimizerConfig o;
  o.name = "sgd";
  o.lr = d.outer_lr;
  o.momentum = d.outer_momentum;
  // torch's SGD takes Nesterov only with momentum.
  o.nesterov = d.outer_optimizer == "nesterov" && d.outer_momentum > 0;
  o.weight_decay = 0;
  return o;
}

int64_t roundsOf(int64_t steps, int64_t h) { return (steps + h - 1) / h; }

DilocoStrategy::DilocoStrategy(cluster::ClusterSpec spec, TrainConfig config, cluster::JobContext& context,
                               bool joined)
    : config_(std::move(config)),
      spec_(std::move(spec)),
      context_(context),
      joined_(joined),
      mode_(psModeOf(config_.distributed)) {
  TANDEM_ENFORCE(config_.distributed.local_steps > 0, "DiLoCo without --local-steps");
}

DilocoStrategy::~DilocoStrategy() = default;

void DilocoStrategy::initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) {
  const int64_t h = config_.distributed.local_steps;
  for (const auto& p : model.parameters()) {
    if (p.requires_grad()) params_.push_back(p);
  }
  inner_ = plan.optimizer;
  const OptimizerConfig o = outerOptimizerOf(config_.distributed);
  outer_ = std::make_unique<torch::optim::SGD>(
      params_, torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov));
  step_ = plan.start_step;
  // Open-ended (the APIs): the caller's settleOpenRun ends the last round.
  total_steps_ = plan.total_steps > 0 ? plan.total_steps : std::numeric_limits<int64_t>::max();
  // A run resumes from the end of a round: its checkpoints are taken there.
  const bool sync = mode() == Mode::PsSync;
  if (!plan.resume_from.empty() && plan.start_step > 0) {
    if (rank() == 0) {
      LoadedCheckpoint(plan.resume_from).restoreOuter(*outer_);
    } else if (inner_ != nullptr && sync) {
      loadOptimizerState(workerStatePath("inner-state", plan.start_step), *inner_);
    } else {
      TANDEM_LOG_INFO("worker {}: async DiLoCo resumes every worker's inner optimizer from the chief's", rank());
    }
  }
  // Async: each worker's round is one of the job's updates.
  const int64_t per_round = sync ? 1 : worldSize();
  StepPlan rounds = plan;
  rounds.steps_per_epoch = std::max<int64_t>(1, plan.steps_per_epoch / h) * per_round;
  rounds.total_steps = plan.total_steps > 0 ? roundsOf(plan.total_steps, h) * per_round : 0;
  rounds.start_step = roundsOf(plan.start_step, h) * per_round;
  rounds.optimizer = outer_.get();
  const auto& d = config_.distributed;
  std::optional<FragmentSchedule> schedule;
  const TrainConfig outer_run = outerRunOf(config_);
  PsSetup setup{spec_, outer_run, mode_, context_, joined_, {}};
  if (streamsFragments(d)) {
    TANDEM_ENFORCE(plan.total_steps > 0, "streaming DiLoCo needs the run's length");
    schedule.emplace(h, static_cast<int>(d.fragments), d.fragment_delay);
    // ps 0's clock counts exchanges; each chunk's servers count its fragment's.
    rounds.start_step = FragmentClocks::reportsAt(*schedule, plan.start_step);
    rounds.total_steps = FragmentClocks::reportsAfter(*schedule, plan.start_step, plan.total_steps);
    rounds.steps_per_epoch = std::max<int64_t>(1, plan.steps_per_epoch * d.fragments / h);
    setup.chunk_clock = FragmentExchange::chunkClocks(*schedule, plan.start_step);
  }
  link_ = connectToServers(model, fingerprint, rounds, setup);
  clock_ = link_.step;
  round_start_ = Clock::now();
  if (schedule) {
    fragments_ = std::make_unique<FragmentExchange>(*schedule, d.fragment_mix, link_, worldSize(), pushFormatOf(d),
                                                    plan.start_step);
    // The exchange took the global model from the model; the worker trains on from its own.
    if (!plan.resume_from.empty() && plan.start_step > 0) {
      loadTensors(workerStatePath("local-model", plan.start_step), params_);
    }
  } else {
    pushes_ = std::make_unique<PsPushPipeline>(*link_.worker, link_.model, link_.host.get(), link_.shared_grads,
                                               /*from_autograd=*/false);
    pulls_ = std::make_unique<PsPullLanding>(link_);
    torch::NoGradGuard no_grad;
    for (const auto& p : params_) global_.push_back(p.detach().clone());
  }
  last_contact_ = Clock::now();
  if (rank() == 0 && schedule) {
    TANDEM_LOG_INFO("streaming DiLoCo: {} fragment(s), one exchanged every {} step(s), each merged {} step(s) later "
                    "at mix {}",
                    d.fragments, h / d.fragments, d.fragment_delay, d.fragment_mix);
  }
  if (rank() == 0) {
    TANDEM_LOG_INFO("DiLoCo: {} local steps a round, then {} (lr {}, momentum {}) on the servers{}", h,
                    o.nesterov ? "Nesterov" : "SGD", o.lr, o.momentum,
                    plan.total_steps > 0 ? fmt::format(": rounds {} to {}", roundsOf(plan.start_step, h),
                                                       roundsOf(plan.total_steps, h))
                                         : "");
  }
}

AgreedStep DilocoStrategy::synchronizeGradients(torch::nn::Module& model, const LocalStep& local) {
  stop_wanted_ = stop_wanted_ || local.stop_requested;
  checkpoint_wanted_ = checkpoint_wanted_ || local.checkpoint_requested;
  AgreedStep agreed = averageMicroBatches(model, local);
  agreed.stop = false;  // agreed at the round's end
  return agreed;
}

SyncTimes DilocoStrategy::afterUpdate(torch::nn::Module& model, AgreedStep& agreed) {
  ++step_;
  if (fragments_) return exchangeFragments(agreed);
  if (step_ % config_.distributed.local_steps != 0 && step_ < total_steps_) {
    agreed.replicas_agree = false;
    keepAliveIfQuiet();
    return {};
  }
  return exchange(model, agreed);
}

void DilocoStrategy::keepAliveIfQuiet() {
  if (secondsSince(last_contact_) > config_.distributed.peer_timeout_s / 4) {
    if (link_.worker) link_.worker->sayAlive();
    last_contact_ = Clock::now();
  }
}

SyncTimes DilocoStrategy::exchangeFragments(AgreedStep& agreed) {
  const ps::StepReport report{agreed.loss, 0.0, stop_wanted_, checkpoint_wanted_};
  const FragmentExchange::Outcome out = fragments_->afterStep(step_, step_ >= total_steps_, report);
  if (out.reported) {
    stop_wanted_ = checkpoint_wanted_ = false;
    last_contact_ = Clock::now();
  } else {
    keepAliveIfQuiet();
  }
  if (out.agreement) {
    agreed.loss = out.agreement->loss;
    agreed.stop = out.agreement->stop;
  }
  agreed.replicas_agree = on_global_ = out.everything;
  // Right after a merge no exchange is in flight: the servers hold every
  // fragment's last global values, and each worker its own model.
  agreed.checkpoint = out.agreement && out.agreement->checkpoint && !out.everything;
  // The chief asks each step until one is taken: asks since the report are this one's.
  if (agreed.checkpoint) checkpoint_wanted_ = false;
  if (agreed.checkpoint || out.everything) saveWorkerState(step_);
  return out.times;
}

void DilocoStrategy::settleOpenRun(torch::nn::Module& model) {
  if (step_ % config_.distributed.local_steps == 0) return;
  AgreedStep agreed;
  exchange(model, agreed);
}

SyncTimes DilocoStrategy::exchange(torch::nn::Module& model, AgreedStep& agreed) {
  {
    // The outer gradients take the last global model's place: keepGlobal
    // below puts the new one there.
    torch::NoGradGuard no_grad;
    for (size_t p = 0; p < params_.size(); ++p) global_[p].sub_(params_[p]);
  }
  Stopwatch watch;
  const double compute = secondsSince(round_start_);
  // Each worker's share of the mean (async: of the update).
  pushes_->offer(clock_, global_, 1.0 / worldSize());
  const Deadline deadline = link_.peerDeadline();
  pushes_->drain(deadline);
  const int64_t finished = clock_ + 1;
  const ps::StepAgreement after =
      link_.worker->reportStep(finished, {agreed.loss, compute, stop_wanted_, checkpoint_wanted_}, deadline);
  const double clock_wait = watch.elapsed();
  max_lead_ = std::max<int64_t>(max_lead_, finished - after.slowest_clock);
  link_.worker->awaitPushes(deadline, clock_);
  SyncTimes times;
  pulls_->expect();
  times.update = pulls_->receive(deadline, clock_);
  if (mode_ == Mode::PsSync) times.wait_workers = std::clamp(after.slowest_compute_seconds - compute, 0.0, clock_wait);
  times.exposed_comm = std::max(0.0, watch.elapsed() - times.update - times.wait_workers);
  clock_ = finished;
  round_start_ = Clock::now();
  keepGlobal();
  last_contact_ = Clock::now();
  ++rounds_;
  stop_wanted_ = checkpoint_wanted_ = false;
  agreed.loss = after.loss;
  agreed.stop = after.stop;
  agreed.checkpoint = after.checkpoint;
  agreed.replicas_agree = true;
  // The chief's checkpoint holds its own inner state; the others keep theirs.
  if (policy().checkpoints_by_agreement && (after.checkpoint || after.stop || step_ >= total_steps_)) saveWorkerState(step_);
  return times;
}

std::optional<int64_t> DilocoStrategy::prepareCheckpoint(torch::optim::Optimizer&) {
  if (fragments_ && !on_global_) {
    torch::NoGradGuard no_grad;
    own_model_.clear();
    for (const auto& p : params_) own_model_.push_back(p.detach().clone());
  }
  // May put the servers' float32 values into the model (streaming: always).
  const OptimizerConfig outer = outerOptimizerOf(config_.distributed);
  fetchServerState(link_,
                   {.mode = mode_,
                    .step = clock_,
                    .streaming = fragments_ != nullptr,
                    .wire = config_.distributed.wire_dtype,
                    .optimizer = &outer},
                   *outer_);
  keepGlobal();
  return std::nullopt;
}

void DilocoStrategy::checkpointSaved() {
  torch::NoGradGuard no_grad;
  for (size_t p = 0; p < own_model_.size(); ++p) params_[p].copy_(own_model_[p]);
  own_model_.clear();
}

int64_t DilocoStrategy::awaitJobEnd(int64_t own_step) {
  if (mode() == Mode::PsSync) return own_step;
  // The others have at most one granted round to finish; a dead one is
  // given up on by ps 0 after --peer-timeout of silence.
  pulls_->receiveFinalModel(clock_, Deadline::afterSeconds(config_.distributed.peer_timeout_s * 2.0 + 5.0));
  keepGlobal();
  return own_step;
}

void DilocoStrategy::finish() {
  if (link_.worker && !link_.worker->done()) link_.worker->sayDone(link_.peerDeadline());
  pushes_.reset();  // nothing pushes any more
  link_.hangUp();
}

void DilocoStrategy::keepGlobal() {
  torch::NoGradGuard no_grad;
  for (size_t p = 0; p < global_.size(); ++p) global_[p].copy_(params_[p]);
}

std::filesystem::path DilocoStrategy::workerStatePath(const char* kind, int64_t step) const {
  return std::filesystem::path(config_.out_dir) / "workers" / fmt::format("worker-{}", rank()) / kind /
         fmt::format("step-{}.pt", step);
}

void DilocoStrategy::saveWorkerState(int64_t step) const {
  // As many as the chief keeps periodic checkpoints, and its final one.
  const int keep = config_.keep_checkpoints > 0 ? config_.keep_checkpoints + 1 : 0;
  // The chief's checkpoint holds its own inner state.
  if (rank() != 0 && inner_ != nullptr) {
    const std::filesystem::path path = workerStatePath("inner-state", step);
    saveOptimizerState(path, *inner_);
    pruneStepFiles(path.parent_path(), ".pt", step, keep);
  }
  // Streaming: between merges each worker's model is its own.
  if (fragments_) {
    const std::filesystem::path path = workerStatePath("local-model", step);
    saveTensors(path, params_);
    pruneStepFiles(path.parent_path(), ".pt", step, keep);
  }
}

nlohmann::json DilocoStrategy::summary() const {
  nlohmann::json s = link_.summary();
  s["priority"] = false;  // pulls land during the exchange, never behind a forward
  s["max_lead_steps"] = max_lead_;
  const auto& d = config_.distributed;
  // Each round pushes and pulls what this worker exchanges with the servers
  // once: the model, or with host sums its own chunks.
  // Pushes may be quantised (--push-bits); pulls travel in the wire dtype.
  const PushFormat pushes = pushFormatOf(d);
  const int64_t pushed = fragments_ ? fragments_->pushedBytes() : rounds_ * link_.ownBytes(pushes);
  const int64_t pulled = fragments_ ? fragments_->pulledBytes() : rounds_ * link_.ownBytes({d.wire_dtype, 0});
  s["diloco"] = {{"local_steps", d.local_steps}, {"outer_optimizer", d.outer_optimizer},
                 {"outer_lr", d.outer_lr},       {"outer_momentum", d.outer_momentum},
                 {"rounds", rounds_},            {"pushed_bytes", pushed},
                 {"pulled_bytes", pulled},       {"push_format", pushes.name()}};
  if (fragments_) {
    s["diloco"].erase("rounds");  // fragments are exchanged one at a time
    s["diloco"]["streaming"] = {{"fragments", d.fragments}, {"delay", d.fragment_delay},
                                {"mix", d.fragment_mix},    {"exchanges", fragments_->exchanges()}};
  }
  return s;
}

}  // namespace tandem::train
