#include "train/trainer.hpp"

#include <torch/torch.h>

#include <sys/resource.h>

#include <fmt/ranges.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cluster/job_start.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "data/prefetcher.hpp"
#include "models/scripted_model.hpp"
#include "obs/metrics_writer.hpp"
#include "obs/progress.hpp"
#include "obs/step_breakdown.hpp"
#include "train/blas_check.hpp"
#include "train/runtime_info.hpp"
#include "train/checkpoint.hpp"
#include "train/device_feeder.hpp"
#include "obs/timeline.hpp"
#include "train/emulated_compute.hpp"
#include "train/evaluator.hpp"
#include "train/fused_step.hpp"
#include "train/loss.hpp"
#include "train/lr_schedule.hpp"
#include "train/loss_scale.hpp"
#include "train/mixed_precision.hpp"
#include "train/run_placement.hpp"
#include "train/model_for_dataset.hpp"
#include "train/run_directory.hpp"
#include "train/optimizer.hpp"

namespace tandem::train {
namespace fs = std::filesystem;

namespace {

void requireSame(const nlohmann::json& a, const nlohmann::json& b, const char* field, const std::string& checkpoint) {
  if (a != b) {
    throw InputError(fmt::format("checkpoint {}: {} differs: checkpoint has {}, this run has {}", checkpoint, field,
                                 b.dump(), a.dump()));
  }
}

// Rolling statistics between two log lines.
struct IntervalStats {
  double loss_sum = 0;
  double seconds = 0;  // step time only: evaluation and checkpoints excluded
  int64_t steps = 0;         // this worker's
  int64_t global_steps = 0;  // the job's
  void reset() { *this = IntervalStats{}; }
};

int64_t minorFaults() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

struct RunDirectoryPlan {
  std::string resume_from;  // "" for a fresh start
  bool automatic = false;   // found in --out rather than given with --resume
};

// What --out holds decides where this run starts: --overwrite clears it,
// the same run continues from its newest checkpoint, another run is refused.
// Every worker decides alike from the same directory; only worker 0 writes.
RunDirectoryPlan planRunDirectory(const TrainConfig& c, bool chief) {
  const fs::path out(c.out_dir);
  if (c.overwrite) {
    // Servers clear their own ps/ps-N, which they may be writing already.
    if (chief) clearRunDirectory(out, "ps");
    return {c.resume_from, false};
  }
  const bool explicit_resume = !c.resume_from.empty();
  auto refuse = [&](const FieldDifference& d) {
    throw InputError(fmt::format("--out {}: holds a different run: {} differs: stored {}, this run {}; pass "
                                 "--overwrite to replace it, or choose another --out",
                                 c.out_dir, d.field, d.stored, d.current));
  };
  std::error_code ec;
  if (!explicit_resume) {
    if (auto latest = latestCheckpoint(out)) {
      const LoadedCheckpoint checkpoint(*latest);
      if (auto d = firstTrajectoryDifference(checkpoint.meta().config, toJson(c), false)) refuse(*d);
      return {latest->string(), true};
    }
  }
  if (fs::exists(runRecordPath(out), ec)) {
    nlohmann::json stored;
    try {
      stored = nlohmann::json::parse(std::ifstream(runRecordPath(out)));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: not a run record ({}); pass --overwrite to replace the run directory",
                                   runRecordPath(out).string(), e.what()));
    }
    if (auto d = firstTrajectoryDifference(stored, toJson(c), explicit_resume)) refuse(*d);
  }
  return {c.resume_from, false};
}

// A rerun of a finished run: report what the directory already holds.
nlohmann::json finishedRunSummary(const fs::path& out, int rank, int64_t step, int64_t total_steps) {
  std::error_code ec;
  if (rank == 0 && fs::exists(out / "summary.json", ec)) {
    try {
      auto summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
      summary["interrupted"] = false;
      return summary;
    } catch (const nlohmann::json::exception&) {
      // fall through to the minimal summary
    }
  }
  return {{"rank", rank}, {"steps", step}, {"planned_steps", total_steps}, {"interrupted", false},
          {"trained_steps", 0}};
}

}  // namespace

nlohmann::json runFingerprint(const TrainConfig& c, const torch::nn::Module& model, int64_t dataset_size,
                              int64_t start_step, int world) {
  nlohmann::json params = nlohmann::json::object();
  auto describe = [](const torch::Tensor& t) {
    return fmt::format("{}[{}]", std::string(c10::toString(t.scalar_type())), fmt::join(t.sizes(), ","));
  };
  for (const auto& item : model.named_parameters()) params[item.key()] = describe(item.value());
  for (const auto& item : model.named_buffers()) params[item.key()] = describe(item.value());
  const nlohmann::json config = toJson(c);
  // A model file is compared by content, so that hosts may keep it at
  // different paths; "about" is not compared, only shown in a mismatch.
  const bool file = models::isModelFile(c.model);
  return {{"model", file ? "torchscript " + models::modelFileDigest(c.model) : c.model},
          {"about", {{"model", c.model}}},
          {"loss", c.loss},
          {"tensors", params},
          {"dataset", c.dataset.name},
          {"dataset_size", dataset_size},
          // What each worker makes of its samples must agree too.
          {"input", {{"augment", c.dataset.augment}, {"image_size", c.dataset.image_size},
                     {"normalize_mean", c.dataset.normalize_mean}, {"normalize_std", c.dataset.normalize_std}}},
          {"batch_size", c.batch_size},
          {"accumulate", c.accumulate},
          {"optimizer", config["optimizer"]},
          {"lr_schedule", config["lr"]},
          {"seed", c.seed},
          {"epochs", c.epochs},
          {"max_steps", c.max_steps},
          {"start_step", start_step},
          {"workers", world}};
}

void checkResumeCompatible(const TrainConfig& current, const TrainConfig& saved, const std::string& checkpoint) {
  requireSame(current.model, saved.model, "model", checkpoint);
  requireSame(current.model_options.mlp_widths, saved.model_options.mlp_widths, "mlp widths", checkpoint);
  requireSame(current.dataset.name, saved.dataset.name, "dataset", checkpoint);
  requireSame(current.batch_size, saved.batch_size, "batch size", checkpoint);
  requireSame(current.optimizer.name, saved.optimizer.name, "optimizer", checkpoint);
  if (current.seed != saved.seed) {
    TANDEM_LOG_WARN("resuming with seed {} but the checkpoint used {}: the data order will differ", current.seed,
                    saved.seed);
  }
}

Trainer::Trainer(TrainConfig config, std::unique_ptr<Strategy> strategy, const std::atomic<bool>* stop,
                 TrainerParts parts)
    : config_(std::move(config)), strategy_(std::move(strategy)), stop_(stop), parts_(std::move(parts)) {
  validate(config_, {parts_.model != nullptr, parts_.data.has_value(), static_cast<bool>(parts_.loss)});
  TANDEM_ENFORCE(strategy_ != nullptr);
}

nlohmann::json Trainer::run() {
  Stopwatch wall;
  const TrainConfig& c = config_;
  int threads = c.threads > 0 ? c.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Emulated compute computes next to nothing, and idle OpenMP threads spin:
  // 2 threads cost 95 ms of CPU per resnet110 step, 1 thread 6 ms.
  if (!c.emulate_compute.empty()) threads = 1;
  torch::set_num_threads(threads);

  // Before anything runs on a GPU: cuBLAS reads its workspace setting when
  // it makes its first handle.
  if (c.deterministic) requireDeterministicKernels();
  const RuntimeInfo runtime = runtimeInfo();
  BlasReport blas = checkBlas(runtime);
  if (auto advice = blasAdvice(blas); !advice.empty()) TANDEM_LOG_WARN("{}", advice);

  data::DatasetSplits splits = parts_.data ? *parts_.data : data::openDataset(c.dataset);
  torch::manual_seed(static_cast<uint64_t>(c.seed));
  models::ModelPtr model = parts_.model ? parts_.model : createModelFor(c, *splits.train);
  const LossFunction loss_fn = parts_.loss ? parts_.loss : lossFunction(c.loss);
  std::unique_ptr<EmulatedCompute> emulated;  // --emulate-compute: timed waits instead of forward and backward
  if (!c.emulate_compute.empty()) {
    const auto shape = splits.train->shape();
    emulated = std::make_unique<EmulatedCompute>(*model, loadComputeProfile(c.emulate_compute),
                                                 std::vector<int64_t>{shape.channels, shape.height, shape.width});
  }
  model->train();
  const RunPlacement placement =
      placeRun(c, *model, parts_.model != nullptr, emulated != nullptr, strategy_->mode(), strategy_->appliesUpdate());
  const TrainingDevice& device = placement.device;
  const Amp amp = placement.amp;

  // The sampler counts micro-batches; an update consumes `accumulate` of them.
  const int64_t accumulate = c.accumulate;
  const int world = strategy_->worldSize();
  data::ShardSampler sampler(splits.train->size(), c.batch_size, strategy_->rank(), world, c.seed);
  if (sampler.stepsPerEpoch() < accumulate) {
    throw InputError(fmt::format("--accumulate: {} micro-batches per update exceed the {} an epoch holds",
                                 accumulate, sampler.stepsPerEpoch()));
  }
  // Async PS: every worker's step is one of the job's global steps, so an
  // epoch (each worker's slice of every global batch) is `world` of them.
  const bool shared_steps = strategy_->sharesSteps();
  const int64_t steps_per_epoch = sampler.stepsPerEpoch() / accumulate * (shared_steps ? world : 1);
  const int64_t total_steps = c.max_steps > 0 ? c.max_steps : c.epochs * steps_per_epoch;
  auto optimizer = makeOptimizer(c.optimizer, model->parameters());
  // Linear scaling counts the samples one update averages over.
  const int averaged_workers = strategy_->averagesWorkers() ? world : 1;
  LrSchedule schedule(c.optimizer, c.lr, steps_per_epoch, total_steps,
                      static_cast<double>(averaged_workers * accumulate));

  // Worker 0 owns the run directory; the others keep their own metrics
  // beside it, so a straggler's breakdown can be read after the run.
  const bool chief = strategy_->rank() == 0;
  const fs::path out_dir(c.out_dir);
  const RunDirectoryPlan plan = planRunDirectory(c, chief);
  int64_t start_step = 0;
  bool nothing_to_do = false;  // a rerun of a finished run
  if (!plan.resume_from.empty()) {
    LoadedCheckpoint checkpoint(plan.resume_from);
    checkResumeCompatible(c, trainConfigFromJson(checkpoint.meta().config), plan.resume_from);
    checkpoint.restore(*model, optimizer.get(), /*restore_rng=*/true);
    start_step = checkpoint.meta().global_step;
    if (start_step >= total_steps) {
      if (plan.automatic) {
        TANDEM_LOG_INFO("{} already holds this run at step {} of {}: nothing to do (raise --max-steps or --epochs "
                        "to train on, or pass --overwrite to start again)",
                        c.out_dir, start_step, total_steps);
        nothing_to_do = true;
      } else {
        throw InputError(fmt::format("checkpoint {} is at step {}, at or past this run's {} steps: nothing to do",
                                   plan.resume_from, start_step, total_steps));
      }
    }
    if (!nothing_to_do) TANDEM_LOG_INFO("resumed from {} at step {}", plan.resume_from, start_step);
  }
  // Restored on the CPU, then moved: the optimizer's parameters keep their identity.
  if (!device.device.is_cpu()) {
    model->to(device.device);
    if (!plan.resume_from.empty()) moveOptimizerState(*optimizer, device.device);
  }
  if (c.channels_last) toChannelsLast(*model);
  LossScale loss_scale;  // fp16 only
  if (chief) {
    // Checkpoints past the restart point belong to an abandoned trajectory.
    pruneCheckpoints(out_dir, start_step, 0);
    if (!plan.automatic) {
      std::error_code ec;
      if (fs::path(plan.resume_from).lexically_normal() != (out_dir / "checkpoint.ckpt").lexically_normal()) {
        fs::remove(out_dir / "checkpoint.ckpt", ec);
      }
      fs::remove(out_dir / "checkpoints" / "latest", ec);
    }
    fs::create_directories(out_dir);
    obs::writeFileAtomically(runRecordPath(out_dir), toJson(c).dump(2) + "\n");
  }
  strategy_->initialize(*model, runFingerprint(c, *model, splits.train->size(), start_step, world),
                        {steps_per_epoch, total_steps, start_step, optimizer.get()});
  strategy_->allowGatedParameters();  // every read below awaits them first
  cluster::jobStart().training = true;  // startup is over: a failure from here on may restart in place
  // A built-in model's stages each wait for their own parameters.
  model->setParameterGate([this](size_t count) { strategy_->awaitParameters(count); });
  struct GateReset {
    models::Model& model;
    ~GateReset() { model.setParameterGate(nullptr); }
  } gate_reset{*model};
  if (nothing_to_do) {
    // Still joined and said done, so that peers and servers end at once too.
    strategy_->finish();
    return finishedRunSummary(out_dir, strategy_->rank(), start_step, total_steps);
  }

  const fs::path run_dir = chief ? out_dir : out_dir / "workers" / fmt::format("worker-{}", strategy_->rank());
  std::optional<obs::Timeline> timeline;  // --timeline: written when the run ends
  if (c.timeline) {
    timeline.emplace(run_dir / fmt::format("timeline-worker-{}.json", strategy_->rank()),
                     fmt::format("worker {}", strategy_->rank()), strategy_->rank());
  }
  obs::MetricsWriter writer(run_dir);
  if (start_step > 0) writer.append({{"type", "resume"}, {"step", start_step}, {"checkpoint", plan.resume_from}});
  const int64_t param_count = models::countParameters(*model);
  TANDEM_LOG_INFO("training {} ({} parameters) on {} ({} samples), {} mode, {} worker(s), {} steps of {} per worker, "
                  "on {} ({}), {} threads, BLAS {}",
                  c.model, param_count, c.dataset.name, splits.train->size(), modeName(strategy_->mode()),
                  strategy_->worldSize(), total_steps - start_step, c.batch_size, device.device.str(), device.reason,
                  threads, blas.library);

  // This worker's own steps index its data: with shared steps it starts at
  // its share of the job's and may, at most, do all that remain.
  // A replacement in a running elastic job reads on where its predecessor
  // stopped, in the same shard.
  const auto takeover = strategy_->takeover();
  const int64_t data_start = takeover ? takeover->job_start_step : start_step;
  int64_t local_start = shared_steps ? data_start / world : data_start;
  if (takeover) local_start += takeover->clock - takeover->job_start_step;
  const int64_t local_end = local_start + std::max<int64_t>(0, total_steps - start_step);
  // On a machine whose cores the compute threads already fill, a prefetch
  // thread preempts one of them and the whole OpenMP team waits for it: the
  // cnn ran 4-14% slower with one (docs/results.md).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // On a GPU the cores only build batches: one thread does it ahead.
  const bool on_gpu = device.device.is_cuda();
  const int prefetch_threads =
      c.prefetch_threads >= 0 ? c.prefetch_threads
                              : (!on_gpu && threads * std::max(1, c.local_processes) >= cores ? 0 : 1);
  data::PrefetchOptions prefetch_options{prefetch_threads, c.prefetch_depth, c.seed};
  prefetch_options.pin_memory = on_gpu;
  data::Prefetcher prefetcher(splits.train, sampler, local_start * accumulate, local_end * accumulate,
                              prefetch_options);
  DeviceFeeder feeder([&prefetcher] { return prefetcher.next(); }, (local_end - local_start) * accumulate,
                      on_gpu ? makeStreamCopier(device.device) : nullptr);
  obs::Progress progress(start_step, total_steps, c.progress);
  // A failing worker still tells its launcher the last step it finished
  // (launch --max-restarts counts the updates a restart loses from it).
  struct RecordOnFailure {
    obs::Progress& progress;
    int exceptions = std::uncaught_exceptions();
    ~RecordOnFailure() {
      if (std::uncaught_exceptions() > exceptions) progress.flushRecord();
    }
  } record_on_failure{progress};
  obs::StepBreakdown breakdown;
  IntervalStats interval;
  const int64_t global_batch = c.batch_size * world * accumulate;
  // Samples one of the job's steps takes: with shared steps it is one
  // worker's batch, otherwise every worker's.
  const int64_t samples_per_job_step = shared_steps ? c.batch_size * accumulate : global_batch;
  double train_seconds = 0;
  double final_loss = 0;  // mean loss of the last logged interval
  EvalResult last_eval;

  auto runEval = [&](int64_t done_steps) {
    if (emulated) return;  // no real forward to evaluate
    strategy_->awaitParameters();
    last_eval = evaluate(*model, *splits.test, c.eval_batch_size, loss_fn);
    writer.append({{"type", "eval"}, {"step", done_steps}, {"epoch", done_steps / steps_per_epoch},
                   {"test_accuracy", last_eval.accuracy}, {"test_loss", last_eval.loss}});
    progress.message(fmt::format("eval at step {}: test accuracy {:.4f}, test loss {:.4f}", done_steps,
                                 last_eval.accuracy, last_eval.loss));
  };
  double last_checkpoint_at = 0;  // train_seconds at the last checkpoint
  // A periodic checkpoint goes to checkpoints/step-N.ckpt, the final one to
  // checkpoint.ckpt. N is the step the state is of: with async parameter
  // servers a snapshot may include steps others made since `done_steps`.
  auto saveAt = [&](bool periodic, int64_t done_steps) {
    const int64_t step = strategy_->prepareCheckpoint(*optimizer).value_or(done_steps);
    const fs::path path =
        periodic ? out_dir / "checkpoints" / fmt::format("step-{}.ckpt", step) : out_dir / "checkpoint.ckpt";
    saveCheckpoint(path, {toJson(c), step, step / steps_per_epoch, modelFingerprint(*model)}, *model,
                   optimizer.get());
    recordLatest(out_dir, path);
    if (periodic) pruneCheckpoints(out_dir, step, c.keep_checkpoints);
    last_checkpoint_at = train_seconds;
  };

  auto stopRequested = [this] { return stop_ != nullptr && stop_->load(); };
  std::vector<torch::Tensor> parameters = model->parameters();

  // `done` is the job's global step: the loop's own count, or what ps 0
  // reports when steps are shared. Cadences fire when `done` crosses them.
  auto crossed = [](int64_t before, int64_t after, int64_t every) {
    return every > 0 && before / every != after / every;
  };
  int64_t done = takeover && !shared_steps ? takeover->clock : start_step;
  int64_t local_steps = 0;
  bool stop_agreed = false;   // a stop request: every worker ends after this step
  bool budget_spent = false;  // shared steps: ps 0 granted the last one
  Stopwatch loop_watch;
  // Page faults from the end of the second step: the first maps the
  // optimizer state and the allocator's pools, and the second may map a
  // second generation of gradients while the first is still held (0 to 16k
  // faults on the MLP, by timing). Neither says anything about a step.
  constexpr int64_t kWarmupSteps = 2;
  int64_t faults_after_warmup = 0;
  for (int64_t local = local_start; local < local_end && done < total_steps && !stop_agreed && !budget_spent;
       ++local) {
    // Parameters awaited between steps (an evaluation, a checkpoint) are
    // not this step's.
    strategy_->takeParameterWaits();
    Stopwatch step_watch;
    Stopwatch phase;
    const int64_t step_start_us = obs::Timeline::nowUs();
    int64_t mark_us = step_start_us;
    auto spanTo = [&](const char* name, nlohmann::json args = nullptr) {
      if (!timeline) return;
      const int64_t now = obs::Timeline::nowUs();
      timeline->span(name, obs::Lane::kLoop, mark_us, now, std::move(args));
      mark_us = now;
    };
    const double lr = schedule.at(done);
    setLearningRate(*optimizer, lr);
    // Unset, not zeroed: backward then hands over fresh gradient tensors
    // instead of adding into buffers a strategy may still be reading.
    for (auto& p : parameters) p.mutable_grad().reset();

    LocalStep step_input;
    step_input.micro_steps = static_cast<int>(accumulate);
    for (int micro = 0; micro < step_input.micro_steps; ++micro) {
      data::Batch batch = feeder.next();
      breakdown.add(obs::Phase::kInputWait, phase.lap());
      spanTo("input wait");
      // Priority scheduling: an emulated layer or a built-in model's stage
      // waits for its own weights; a TorchScript forward for all of them.
      torch::Tensor loss;
      if (emulated) {
        loss = emulated->forward([&](size_t count) { strategy_->awaitParameters(count); });
      } else {
        if (!model->gatesStages()) strategy_->awaitParameters();
        if (c.channels_last) batch.inputs = batch.inputs.contiguous(at::MemoryFormat::ChannelsLast);
        AutocastScope autocast(device.device, amp);
        loss = loss_fn(model->forward(batch.inputs), batch.targets);
      }
      step_input.loss_sum += loss.item<double>();
      step_input.stop_requested = stopRequested();
      strategy_->beforeBackward(step_input, micro);
      if (amp == Amp::kFp16) {
        (loss * loss_scale.scale()).backward();
      } else {
        loss.backward();
      }
      if (c.debug_step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(c.debug_step_delay_ms));
      // Waiting for the last step's parameters is communication, not compute.
      const SyncTimes awaited = strategy_->takeParameterWaits();
      breakdown.add(obs::Phase::kForwardBackward,
                    std::max(0.0, phase.lap() - awaited.exposed_comm - awaited.update));
      breakdown.add(obs::Phase::kExposedComm, awaited.exposed_comm);
      breakdown.add(obs::Phase::kUpdate, awaited.update);
      spanTo(emulated ? "forward+backward (emulated)" : "forward+backward",
             {{"awaited_parameters_ms", awaited.exposed_comm * 1e3}});
    }

    AgreedStep agreed = strategy_->synchronizeGradients(*model, step_input);
    spanTo("synchronize", {{"exposed_comm_ms", agreed.times.exposed_comm * 1e3},
                           {"wait_workers_ms", agreed.times.wait_workers * 1e3}});
    breakdown.add(obs::Phase::kExposedComm, agreed.times.exposed_comm);
    breakdown.add(obs::Phase::kWaitWorkers, agreed.times.wait_workers);
    phase.lap();
    if (strategy_->appliesUpdate()) {
      breakdown.add(obs::Phase::kUpdate, agreed.times.update);
    } else {
      // fp16: every worker checks the same averaged gradients, so all of
      // them skip an overflowing step together.
      const bool apply = amp != Amp::kFp16 || loss_scale.update(unscaleGradients(parameters, loss_scale.scale()));
      if (apply) fusedOptimizerStep(*optimizer, c.optimizer, lr);
      breakdown.add(obs::Phase::kUpdate, phase.lap());
    }
    spanTo("update");
    breakdown.endStep();
    const int64_t before = done;
    done = agreed.global_step >= 0 ? agreed.global_step : done + 1;
    cluster::jobStart().finished_steps = done;  // how far a failed start got (train --restart-wait)
    if (++local_steps == kWarmupSteps) faults_after_warmup = minorFaults();
    budget_spent = shared_steps && agreed.finished;
    if (timeline) timeline->span(fmt::format("step {}", done), obs::Lane::kLoop, step_start_us, obs::Timeline::nowUs());
    const double step_loss = agreed.loss;
    if (agreed.stop && done < total_steps && !budget_spent) {
      stop_agreed = true;
      progress.message(fmt::format("stop requested: ending after step {} with a checkpoint", done));
    }

    if (!std::isfinite(step_loss)) {
      throw Error(fmt::format("loss became {} at step {} (lr {}); lower --lr or check the data", step_loss, done, lr));
    }
    interval.loss_sum += step_loss;
    ++interval.steps;
    interval.global_steps += done - before;
    const int64_t epoch = (done - 1) / steps_per_epoch;
    const double step_seconds = step_watch.elapsed();
    interval.seconds += step_seconds;
    train_seconds += step_seconds;
    // The job's progress over this worker's time: with shared steps not its
    // own rate times the worker count.
    const double samples_per_sec =
        interval.seconds > 0 ? static_cast<double>(interval.global_steps * samples_per_job_step) / interval.seconds
                             : 0;
    const double worker_samples_per_sec =
        interval.seconds > 0 ? static_cast<double>(interval.steps * c.batch_size * accumulate) / interval.seconds : 0;
    const double interval_loss = interval.loss_sum / static_cast<double>(interval.steps);
    const bool last = done >= total_steps || stop_agreed || budget_spent;
    if (crossed(before, done, c.log_every_steps) || last) {
      writer.append({{"type", "train"}, {"step", done}, {"worker_step", local_steps}, {"epoch", epoch},
                     {"loss", interval_loss}, {"lr", lr},
                     {"samples_per_sec", samples_per_sec}, {"step_breakdown", breakdown.toJson()}});
      final_loss = interval_loss;
      interval.reset();
    }
    progress.update({done, epoch, interval_loss, samples_per_sec, lr, worker_samples_per_sec});

    const bool eval_due = c.eval_every_steps > 0 ? crossed(before, done, c.eval_every_steps)
                                                 : crossed(before, done, steps_per_epoch);
    if (chief && eval_due && !last) runEval(done);
    if (crossed(before, done, c.distributed.verify_replicas_every)) strategy_->verifyReplicas(*model, done);
    const bool step_due = crossed(before, done, c.checkpoint_every_steps);
    const bool time_due = c.checkpoint_secs > 0 && train_seconds - last_checkpoint_at >= c.checkpoint_secs;
    if (chief && (step_due || time_due) && !last) {
      saveAt(/*periodic=*/true, done);
    }
  }
  progress.finish();
  // The chief's checkpoint and evaluation must hold every worker's last
  // update: with shared steps or bounded staleness others may still be
  // finishing theirs.
  int64_t end_step = done;
  if (chief) end_step = strategy_->awaitJobEnd(done);
  const double loop_seconds = loop_watch.elapsed();
  const int64_t steady_faults = minorFaults() - faults_after_warmup;
  const bool interrupted = stop_agreed;
  // Saved first: with a 16-bit wire, preparing the checkpoint puts the
  // servers' float32 values into the model, and the evaluation is of those.
  if (chief) saveAt(/*periodic=*/false, end_step);
  if (chief && !interrupted) runEval(end_step);
  // Last: parameter servers may leave once every worker has finished, and the
  // chief's checkpoint still needs their optimizer state.
  strategy_->finish();

  const int64_t trained_steps = end_step - start_step;
  const double job_seconds = shared_steps ? loop_seconds : train_seconds;
  nlohmann::json summary = {
      {"model", c.model},
      {"parameters", param_count},
      {"dataset", c.dataset.name},
      {"mode", std::string(modeName(strategy_->mode()))},
      {"workers", world},
      {"rank", strategy_->rank()},
      {"accumulate", accumulate},
      {"servers", strategy_->serverCount()},
      {"batch_size_per_worker", c.batch_size},
      {"global_batch_size", global_batch},
      {"steps", end_step},
      {"planned_steps", total_steps},
      {"interrupted", interrupted},
      {"trained_steps", trained_steps},
      {"epochs", static_cast<double>(end_step) / static_cast<double>(steps_per_epoch)},
      {"global_step", end_step},
      {"worker_steps", local_steps},
      // The job's samples per second; with shared steps over the training
      // loop's wall time, since the global count includes others' steps.
      {"samples_per_sec", job_seconds > 0 ? static_cast<double>(trained_steps * samples_per_job_step) / job_seconds
                                          : 0},
      // The whole process's page faults per step of this worker after the
      // warm-up: a step that maps and unmaps buffers of its own size shows
      // here. null when no step followed the warm-up.
      {"minor_faults_per_step",
       local_steps > kWarmupSteps
           ? nlohmann::json(static_cast<double>(steady_faults) / static_cast<double>(local_steps - kWarmupSteps))
           : nlohmann::json()},
      {"worker_samples_per_sec",
       train_seconds > 0 ? static_cast<double>(local_steps * c.batch_size * accumulate) / train_seconds : 0},
      {"final_loss", final_loss},
      // Emulated compute has no real forward: nothing was evaluated.
      {"test_accuracy", emulated ? nlohmann::json() : nlohmann::json(last_eval.accuracy)},
      {"test_loss", emulated ? nlohmann::json() : nlohmann::json(last_eval.loss)},
      {"emulated_compute", emulated ? nlohmann::json({{"profile", emulated->profile().path},
                                                      {"device", emulated->profile().device},
                                                      {"forward_ms", emulated->profile().forward_ms},
                                                      {"backward_ms", emulated->profile().backward_ms}})
                                    : nlohmann::json()},
      {"train_seconds", train_seconds},
      {"wall_seconds", wall.elapsed()},
      {"step_breakdown", breakdown.toJson()},
      {"threads", threads},
      {"device", device.device.str()},
      {"device_reason", device.reason},
      {"amp", ampSummary(amp, loss_scale)},
      {"channels_last", c.channels_last},
      {"deterministic", c.deterministic},
      {"local_processes", c.local_processes},
      {"seed", c.seed},
      {"libtorch", runtime.libtorch},
      {"cuda", runtime.cuda_build.empty() ? nlohmann::json(nullptr)
                                          : nlohmann::json({{"build", runtime.cuda_build},
                                                            {"devices_visible", runtime.cuda_devices},
                                                            {"library", runtime.cuda_library}})},
      {"blas", blas.library},
      {"blas_sgemm_gflops", blas.sgemm_gflops},
      {"resumed_from", plan.resume_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(plan.resume_from)},
      {"strategy", strategy_->summary()},
  };
  writer.writeSummary(summary);
  return summary;
}

}  // namespace tandem::train
