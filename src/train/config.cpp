#include "train/config.hpp"

#include <algorithm>
#include <chrono>

#include "cluster/device_placement.hpp"
#include "core/error.hpp"
#include "core/wire_dtype.hpp"
#include "data/dataset.hpp"
#include "models/registry.hpp"
#include "ps/protocol.hpp"
#include "train/loss.hpp"
#include "train/mixed_precision.hpp"

namespace tandem {
void from_json(const nlohmann::json& j, Mode& m) {
  const std::string text = j.get<std::string>();
  if (text == psModeChoice(Mode::PsSync) || text == psModeChoice(Mode::PsAsync)) {
    m = parsePsModeChoice(text, "ps_mode");
  } else {
    m = parseMode(text, "ps_mode");
  }
}
}  // namespace tandem

namespace tandem::train {
namespace {

std::chrono::milliseconds millisOf(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace


namespace {
void requirePositive(int64_t value, const char* flag) {
  if (value <= 0) throw InputError(fmt::format("{}: must be positive, got {}", flag, value));
}
void requireNonNegative(double value, const char* flag) {
  if (!(value >= 0)) throw InputError(fmt::format("{}: must be >= 0, got {}", flag, value));
}
}  // namespace

void validateDiloco(const DistributedConfig& d) {
  if (d.local_steps < 0) throw InputError(fmt::format("--local-steps: must be >= 1, got {}", d.local_steps));
  if (d.outer_optimizer != "nesterov" && d.outer_optimizer != "sgd") {
    throw InputError(fmt::format("--outer-optimizer: the servers' outer optimizers are nesterov and sgd (heavy-ball "
                                 "momentum), got '{}'",
                                 d.outer_optimizer));
  }
  if (!(d.outer_lr > 0 && d.outer_lr <= 100)) {
    throw InputError(fmt::format("--outer-lr: must be in (0, 100], got {}", d.outer_lr));
  }
  if (!(d.outer_momentum >= 0 && d.outer_momentum < 1)) {
    throw InputError(fmt::format("--outer-momentum: must be in [0, 1), got {}", d.outer_momentum));
  }
  if (d.fragments < 1) throw InputError(fmt::format("--fragments: must be >= 1, got {}", d.fragments));
  if (d.fragment_delay < 0) throw InputError(fmt::format("--fragment-delay: must be >= 0, got {}", d.fragment_delay));
  if (!(d.fragment_mix >= 0 && d.fragment_mix <= 1)) {
    throw InputError(fmt::format("--fragment-mix: must be in [0, 1], got {}", d.fragment_mix));
  }
  if (d.local_steps == 0) return;
  if (streamsFragments(d)) {
    if (d.fragments > d.local_steps) {
      throw InputError(fmt::format("--fragments: at most --local-steps ({}), one exchange a step, got {}",
                                   d.local_steps, d.fragments));
    }
    if (d.fragment_delay >= d.local_steps / d.fragments) {
      throw InputError(fmt::format("--fragment-delay: must be below --local-steps / --fragments ({} / {} = {}), so "
                                   "that each exchange is merged before the next starts, got {}",
                                   d.local_steps, d.fragments, d.local_steps / d.fragments, d.fragment_delay));
    }
    if (psModeOf(d) != Mode::PsSync) {
      throw InputError("--fragments, --fragment-delay: streaming DiLoCo runs with --ps-mode sync");
    }
  }
  if (psModeOf(d) == Mode::Ssp) {
    throw InputError("--local-steps: DiLoCo runs with --ps-mode sync or async, not with --staleness");
  }
  if (d.delay_compensation > 0 || d.staleness_lr == AutoSwitch::kOn) {
    throw InputError(fmt::format("--local-steps: not with {} (they correct stale gradients; DiLoCo pushes its "
                                 "workers' changes)",
                                 d.delay_compensation > 0 ? "--delay-compensation" : "--staleness-lr on"));
  }
}

bool streamsFragments(const DistributedConfig& d) {
  return d.local_steps > 0 && (d.fragments > 1 || d.fragment_delay > 0);
}

void applyOptimizerDefaults(OptimizerConfig& c, std::optional<double> momentum, std::optional<double> weight_decay) {
  const optim::OptimizerSettings defaults = optim::optimizerDefaults(c.name);
  c.momentum = momentum.value_or(defaults.momentum);
  c.weight_decay = weight_decay.value_or(defaults.weight_decay);
}

void validateDistributed(const DistributedConfig& d) {
  if (!(d.bucket_mb >= 0)) throw InputError("--bucket-mb: must be >= 0 (0: sized from the model)");
  if (!(d.peer_timeout_s > 0)) throw InputError("--peer-timeout: must be > 0 seconds");
  if (!(d.rendezvous_timeout_s > 0)) throw InputError("--rendezvous-timeout: must be > 0 seconds");
  if (!(d.restart_wait_s >= 0)) throw InputError("--restart-wait: must be >= 0 seconds");
  if (!(d.heartbeat_timeout_s >= 0.1 && d.heartbeat_timeout_s <= 3600)) {
    throw InputError("--heartbeat-timeout: must be 0.1-3600 seconds");
  }
  if (d.verify_replicas_every < 0) throw InputError("--verify-replicas-every: must be >= 0");
  if (d.min_workers < 0) throw InputError(fmt::format("--min-workers: must be >= 0, got {}", d.min_workers));
  if (d.max_workers < 0) throw InputError(fmt::format("--max-workers: must be >= 0, got {}", d.max_workers));
  if (d.ps_mode != Mode::PsSync && d.ps_mode != Mode::PsAsync) {
    throw InputError(fmt::format("--ps-mode: expected {}, got {}", choicesText(psModeChoices()),
                                 modeName(d.ps_mode)));
  }
  if (d.staleness < -1) {
    throw InputError(fmt::format("--staleness: must be >= 0, got {}", d.staleness));
  }
  if (!(d.ps_chunk_mb >= 0) || d.ps_chunk_mb > 64) {
    throw InputError(fmt::format("--ps-chunk-mb: must be 0 (from the model) or in (0, 64], got {}",
                                 d.ps_chunk_mb));
  }
  if (d.ps_threads < 0) throw InputError("--ps-threads: must be >= 0");
  if (!(d.delay_compensation >= 0 && d.delay_compensation <= 1e6)) {
    throw InputError(fmt::format("--delay-compensation: must be in [0, 1e6], got {}", d.delay_compensation));
  }
  if (d.delay_compensation > 0 && psModeOf(d) == Mode::PsSync) {
    throw InputError("--delay-compensation: needs --ps-mode async or --staleness k > 0 (sync gradients are never "
                     "stale)");
  }
  if (d.delay_compensation_form != ps::DelayForm::kAdaptive && d.delay_compensation == 0) {
    throw InputError("--delay-compensation-form: only applies with --delay-compensation LAMBDA0 > 0");
  }
  if (d.staleness_lr == AutoSwitch::kOn && psModeOf(d) == Mode::PsSync) {
    throw InputError("--staleness-lr on: needs --ps-mode async or --staleness k > 0 (sync gradients are never stale)");
  }
  if (d.async_momentum_correction == AutoSwitch::kOn) {
    if (!stalenessLrOn(d)) {
      throw InputError("--async-momentum-correction on: needs staleness-aware rates (async or --staleness k > 0, "
                       "without --staleness-lr off), whose measured staleness it corrects for");
    }
    if (d.delay_compensation > 0) {
      throw InputError("--async-momentum-correction on: not with --delay-compensation (its correction of stale "
                       "gradients would count the staleness twice)");
    }
  }
  if (d.ps_replicas < 1) throw InputError(fmt::format("--ps-replicas: must be >= 1, got {}", d.ps_replicas));
  validateDiloco(d);
  if (d.wire_dtype == WireDtype::kFloat32 && d.error_feedback) {
    throw InputError("--error-feedback: needs --wire-dtype fp16 or bf16 (float32 loses nothing to carry)");
  }
  checkPushBits(d.push_bits);
}

void validate(const TrainConfig& c, SuppliedParts supplied) {
  // Names first, so a typo fails before any data is loaded.
  if (!supplied.model) models::requireKnownModel(c.model);
  if (!supplied.loss) requireKnownLoss(c.loss);
  if (!supplied.data) data::requireKnownDataset(c.dataset.name);
  requirePositive(c.batch_size, "--batch-size");
  if (c.max_steps <= 0) requirePositive(c.epochs, "--epochs");
  if (c.max_steps < 0) throw InputError(fmt::format("--max-steps: must be >= 0, got {}", c.max_steps));
  if (c.threads < 0) throw InputError(fmt::format("--threads: must be >= 0, got {}", c.threads));
  cluster::parseDeviceRequest(c.device);  // names --device when malformed
  if (c.prefetch_threads < -1) throw InputError("--prefetch-threads: must be >= 0, or -1 (auto)");
  requirePositive(c.prefetch_depth, "--prefetch-depth");
  requirePositive(c.eval_batch_size, "--eval-batch-size");
  requirePositive(c.log_every_steps, "--log-every");
  if (c.eval_every_steps < 0) throw InputError("--eval-every: must be >= 0");
  if (c.checkpoint_every_steps < 0) throw InputError("--checkpoint-every: must be >= 0");
  if (!(c.checkpoint_secs >= 0)) throw InputError(fmt::format("--checkpoint-secs: must be >= 0, got {}", c.checkpoint_secs));
  if (c.keep_checkpoints < 0) throw InputError(fmt::format("--keep-checkpoints: must be >= 0, got {}", c.keep_checkpoints));
  if (!optim::knownOptimizer(c.optimizer.name)) {
    throw InputError(
        fmt::format("--optimizer: unknown optimizer '{}' (use sgd, adam, adamw or rmsprop)", c.optimizer.name));
  }
  if (!(c.optimizer.alpha >= 0 && c.optimizer.alpha < 1)) {
    throw InputError(fmt::format("--rmsprop-alpha: must be in [0, 1), got {}", c.optimizer.alpha));
  }
  for (const auto& [value, flag] : {std::pair{c.optimizer.beta1, "--adam-beta1"}, {c.optimizer.beta2, "--adam-beta2"}}) {
    if (!(value >= 0 && value < 1)) throw InputError(fmt::format("{}: must be in [0, 1), got {}", flag, value));
  }
  if (!(c.optimizer.eps > 0)) throw InputError(fmt::format("--eps: must be > 0, got {}", c.optimizer.eps));
  if (c.optimizer.centered && c.optimizer.name != "rmsprop") {
    throw InputError("--rmsprop-centered: needs --optimizer rmsprop");
  }
  if (!(c.optimizer.lr > 0)) throw InputError(fmt::format("--lr: must be > 0, got {}", c.optimizer.lr));
  requireNonNegative(c.optimizer.momentum, "--momentum");
  requireNonNegative(c.optimizer.weight_decay, "--weight-decay");
  if (c.optimizer.nesterov && (c.optimizer.name != "sgd" || c.optimizer.momentum <= 0)) {
    throw InputError("--nesterov: needs --optimizer sgd with --momentum > 0");
  }
  requirePositive(c.accumulate, "--accumulate");
  validateDistributed(c.distributed);
  if (c.debug_step_delay_ms < 0) throw InputError("--debug-step-delay-ms: must be >= 0");
  if (c.out_dir.empty()) throw InputError("--out: must not be empty");
  for (int64_t w : c.model_options.mlp_widths) requirePositive(w, "--mlp-widths");
}

bool wantsLiveMembership(const DistributedConfig& config, int workers) {
  return (config.min_workers > 0 && config.min_workers < workers) || config.max_workers > workers;
}

void checkPsReplicas(const DistributedConfig& config, int servers) {
  if (config.ps_replicas <= 1) return;
  if (config.ps_replicas > servers) {
    throw InputError(fmt::format("--ps-replicas {} with {} server(s): each chunk needs that many different servers",
                                 config.ps_replicas, servers));
  }
  if (config.ps_replicas > 2) {
    throw InputError(fmt::format("--ps-replicas {}: at most 2 (each chunk's own server and the next)",
                                 config.ps_replicas));
  }
  if (psModeOf(config) != Mode::PsSync && config.delay_compensation > 0) {
    // The backup would need each worker's last pulled values, which only the primary sees.
    throw InputError(fmt::format("--ps-replicas {} with --delay-compensation {}: not built yet",
                                 config.ps_replicas, config.delay_compensation));
  }
}

cluster::QuorumOptions quorumOptions(const DistributedConfig& config, int workers) {
  if (config.min_workers > workers) {
    throw InputError(fmt::format("--min-workers {}: the job has only {} workers", config.min_workers, workers));
  }
  if (config.max_workers > 0 && config.max_workers < workers) {
    throw InputError(fmt::format("--max-workers {} is below the job's {} workers", config.max_workers, workers));
  }
  cluster::QuorumOptions options;
  options.min_workers = config.min_workers > 0 ? config.min_workers : workers;
  options.max_workers = std::max(workers, config.max_workers);
  options.heartbeat_timeout = millisOf(config.heartbeat_timeout_s);
  // Beats are a few bytes to the coordinator: often enough that a killed
  // worker is suspected within a second of a failed collective.
  options.beat_interval = std::min(options.heartbeat_timeout / 5, std::chrono::milliseconds(250));
  options.suspect_after = 4 * options.beat_interval;
  // A live member still inside a collective has, at most, Gloo's timeout to leave it.
  options.arrival_timeout = millisOf(config.peer_timeout_s);
  return options;
}

Mode psModeOf(const DistributedConfig& config) {
  if (config.staleness == 0) return Mode::PsSync;
  if (config.staleness > 0) return Mode::Ssp;
  return config.ps_mode;
}

bool momentumCorrectionOn(const DistributedConfig& config) {
  if (config.async_momentum_correction != AutoSwitch::kAuto) return config.async_momentum_correction == AutoSwitch::kOn;
  return stalenessLrOn(config) && config.delay_compensation == 0;
}

bool stalenessLrOn(const DistributedConfig& config) {
  if (config.staleness_lr != AutoSwitch::kAuto) return config.staleness_lr == AutoSwitch::kOn;
  return psModeOf(config) != Mode::PsSync && config.local_steps == 0;
}

}  // namespace tandem::train
