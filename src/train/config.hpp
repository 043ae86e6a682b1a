#pragma once
// Everything a training run is configured by. Filled by the CLI (or a test)
// and passed down; nothing below reads flags or the environment. Torch-free,
// so that a PS task can take it.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cluster/host_aggregation.hpp"
#include "cluster/quorum.hpp"
#include "core/enum_json.hpp"
#include "core/training_mode.hpp"
#include "core/push_format.hpp"
#include "core/wire_dtype.hpp"
#include "data/dataset_options.hpp"
#include "models/model_options.hpp"
#include "obs/progress.hpp"
#include "optim/kernels.hpp"
#include "ps/delay_compensation.hpp"

namespace tandem::data {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SampleShape, channels, height, width)
}  // namespace tandem::data

namespace tandem {
// Older configs' aliases (float16, ...) still load.
inline void to_json(nlohmann::json& j, WireDtype d) { j = wireDtypeName(d); }
inline void from_json(const nlohmann::json& j, WireDtype& d) { d = parseWireDtype(j.get<std::string>(), "wire_dtype"); }
// A mode's JSON is its name; configs saved before the one mode enum hold
// --ps-mode's spelling (sync, async), which still loads.
inline void to_json(nlohmann::json& j, Mode m) { j = modeName(m); }
void from_json(const nlohmann::json& j, Mode& m);
}  // namespace tandem

namespace tandem::train {

// An on/off setting (--priority, --ps-shared-memory).
enum class Switch { kOff, kOn };
inline constexpr EnumNames<Switch, 2> kSwitchNames = {{{Switch::kOn, "on"}, {Switch::kOff, "off"}}};
// The same, where auto (the default) is on wherever the setting applies.
enum class AutoSwitch { kAuto, kOn, kOff };
inline constexpr EnumNames<AutoSwitch, 3> kAutoSwitchNames = {
    {{AutoSwitch::kAuto, "auto"}, {AutoSwitch::kOn, "on"}, {AutoSwitch::kOff, "off"}}};
// --lr-scaling: rates as given, or times the samples an update averages.
enum class LrScaling { kNone, kLinear };
inline constexpr EnumNames<LrScaling, 2> kLrScalingNames = {{{LrScaling::kNone, "none"}, {LrScaling::kLinear, "linear"}}};
// --amp: the forward's mixed precision (train/mixed_precision.hpp).
enum class Amp { kOff, kBf16, kFp16 };
inline constexpr EnumNames<Amp, 3> kAmpNames = {{{Amp::kOff, "off"}, {Amp::kBf16, "bf16"}, {Amp::kFp16, "fp16"}}};
// --lr-schedule, and --lr-boundary-unit for piecewise boundaries.
enum class LrScheduleKind { kConstant, kPiecewise, kCosine };
inline constexpr EnumNames<LrScheduleKind, 3> kLrScheduleNames = {
    {{LrScheduleKind::kConstant, "constant"}, {LrScheduleKind::kPiecewise, "piecewise"}, {LrScheduleKind::kCosine, "cosine"}}};
enum class LrUnit { kStep, kEpoch };
// --gpu-collective: how GPU workers' all-reduce sums (train/nccl_buckets.hpp).
enum class GpuCollective { kAuto, kNccl, kGloo };
inline constexpr EnumNames<GpuCollective, 3> kGpuCollectiveNames = {
    {{GpuCollective::kAuto, "auto"}, {GpuCollective::kNccl, "nccl"}, {GpuCollective::kGloo, "gloo"}}};
inline constexpr EnumNames<LrUnit, 2> kLrUnitNames = {{{LrUnit::kStep, "step"}, {LrUnit::kEpoch, "epoch"}}};
TANDEM_ENUM_JSON(Switch, kSwitchNames, "on/off setting")
TANDEM_ENUM_JSON(AutoSwitch, kAutoSwitchNames, "auto/on/off setting")
TANDEM_ENUM_JSON(LrScaling, kLrScalingNames, "lr scaling")
TANDEM_ENUM_JSON(Amp, kAmpNames, "amp")
TANDEM_ENUM_JSON(LrScheduleKind, kLrScheduleNames, "lr schedule")
TANDEM_ENUM_JSON(LrUnit, kLrUnitNames, "lr boundary unit")
TANDEM_ENUM_JSON(GpuCollective, kGpuCollectiveNames, "gpu collective")

// The optimizer exactly as the kernels take it (every mode runs the same
// optim/kernels), plus the base learning rate the schedule scales.
struct OptimizerConfig : optim::OptimizerSettings {
  OptimizerConfig() : optim::OptimizerSettings(optim::optimizerDefaults("sgd")) {}
  double lr = 0.05;
};

// Sets `c.name`'s default momentum and weight decay (optim::optimizerDefaults)
// where the caller gave none: the one place `tandem train` and tandem::fit
// resolve them.
void applyOptimizerDefaults(OptimizerConfig& c, std::optional<double> momentum, std::optional<double> weight_decay);

struct LrScheduleConfig {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  LrUnit unit = LrUnit::kStep;    // what piecewise boundaries count
  std::vector<int64_t> boundaries;
  std::vector<double> values;     // piecewise: boundaries.size() + 1 learning rates
  double min_lr = 0.0;            // cosine floor
  int64_t warmup_steps = 0;       // linear warmup in front of any schedule
  // kLinear: multiply rates by the number of samples an update averages
  // over relative to one micro-batch (workers x accumulate), and warm up
  // from the unscaled rate (Goyal et al. 2017) instead of from 0.
  LrScaling scaling = LrScaling::kNone;
};

// How the tasks of a distributed run talk; ignored standalone.
struct DistributedConfig {
  double bucket_mb = 0;                  // all-reduce gradient bucket cap, MiB; 0: from the model (as PS chunks)
  double peer_timeout_s = 120;           // a collective or a step waits this long for a peer
  double rendezvous_timeout_s = 60;      // joining the cluster waits this long
  double heartbeat_timeout_s = 5;        // a PS link silent this long is lost (a dead server is named then)
  // After the job loses a task: 0, this task exits 1; > 0, it starts itself
  // again in place and waits this long for the job's next start (every
  // task continuing from the newest checkpoint).
  double restart_wait_s = 0;
  int64_t verify_replicas_every = 0;     // compare parameter checksums every N steps (0: never)
  // All-reduce with a live membership (cluster/quorum.hpp): the job goes on
  // while at least min_workers remain (0: every worker, so a death ends it).
  int min_workers = 0;
  // Joiners are taken in up to this many members (--max-workers; 0: the
  // starting size): workers beyond the list join the running job.
  int max_workers = 0;
  // Parameter-server mode (used when the cluster has PS tasks): PsSync,
  // every worker's gradient each step, or PsAsync, each push as it comes
  // (--ps-mode sync|async; psModeOf gives the mode --staleness makes it).
  Mode ps_mode = Mode::PsSync;
  int staleness = -1;                    // >= 0: bounded staleness (0 is sync), overriding ps_mode
  // Servers holding each chunk (--ps-replicas): 2 keeps a sync job going,
  // losing no update, when one server dies (ps/key_layout.hpp).
  int ps_replicas = 1;
  double ps_chunk_mb = 0;                // parameter chunk size; 0: from the model (ps::autoPsChunkFloats)
  int ps_threads = 0;                    // apply threads per server (0: all cores)
  // How gradient buckets and PS chunks travel: fp32, fp16 or bf16
  // (core/wire_dtype.hpp). Master weights and optimizer state stay float32.
  WireDtype wire_dtype = WireDtype::kFloat32;
  bool error_feedback = false;  // carry each value's rounding into its next send
  // PS pushes quantised to 8 or 4 bits a value, with error feedback
  // (core/push_format.hpp); 0: pushes travel as wire_dtype. Pulls keep it.
  int push_bits = 0;
  // All-reduce and sync PS: auto sums each host's workers' gradients
  // locally before one of them sends the host's sum (when the job spans
  // hosts and a host has several workers); off has every worker send alone.
  cluster::HostAggregation hierarchical = cluster::HostAggregation::kAuto;
  // All-reduce of GPU workers: nccl sums the buckets in device memory;
  // gloo copies them to the host and sums there; auto is nccl unless NCCL
  // is missing or two workers share a GPU (NCCL takes one rank a GPU).
  GpuCollective gpu_collective = GpuCollective::kAuto;
  // Async and SSP: DC-ASGD's lambda0 on the servers (ps/delay_compensation.hpp); 0: off.
  double delay_compensation = 0;
  // adaptive (lambda0 over each value's root mean square gradient) or constant
  ps::DelayForm delay_compensation_form = ps::DelayForm::kAdaptive;
  // Async and SSP: each push's rate divided by its staleness on the servers
  // (stalenessLrOn says where auto turns it on).
  AutoSwitch staleness_lr = AutoSwitch::kAuto;
  // With staleness-aware rates: the servers lower the momentum (Adam's
  // beta1) for the momentum the measured staleness adds
  // (ps/staleness_counts.hpp); auto: on where staleness-aware rates are,
  // but for delay compensation and replicas.
  AutoSwitch async_momentum_correction = AutoSwitch::kAuto;
  // DiLoCo (train/diloco_strategy.hpp): > 0, each worker takes this many
  // steps with its own optimizer, then pushes its parameters' change since
  // the last global model and the servers apply the outer optimizer to the
  // workers' mean; 0: off (every step's gradient goes to the servers).
  int64_t local_steps = 0;
  std::string outer_optimizer = "nesterov";  // nesterov | sgd (heavy-ball momentum)
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  // Streaming DiLoCo (train/fragment_schedule.hpp): the model's chunks in
  // this many fragments, exchanged at staggered steps; each exchange is
  // merged `fragment_delay` steps after it starts (overlapped with them), as
  // mix * local + (1 - mix) * global. 1 and 0: plain DiLoCo.
  int64_t fragments = 1;
  int64_t fragment_delay = 0;
  double fragment_mix = 0.5;
  // PS: on sends queued pushes (and their pulls) first layers first within
  // a window of two chunks per server, and lets the next forward start as
  // soon as its first layers' parameters are in (P3); off: every push goes
  // out as backward completes it, and every pull is in before the step ends.
  Switch priority = Switch::kOn;
  // PS: workers and servers on one host exchange pushes and pulls through
  // the worker's shared memory (on) or through the socket only (off).
  Switch shared_memory = Switch::kOn;
  // The address this task's listening ports (the coordinator, a PS) bind:
  // empty: the address its own host name in the cluster resolves to here;
  // 0.0.0.0: every interface, only when asked for.
  std::string bind;
};

// The consistency a PS run uses, from --ps-mode and --staleness (0: sync):
// ps-sync, ps-async or ps-ssp.
Mode psModeOf(const DistributedConfig& config);
// Whether the servers divide each push's rate by its staleness: on, or
// auto where pushes are stale gradients (async and bounded staleness, not
// DiLoCo's changes).
bool stalenessLrOn(const DistributedConfig& config);
// Whether the servers correct the momentum for the staleness they measure.
bool momentumCorrectionOn(const DistributedConfig& config);

// Whether an all-reduce job of `workers` has a live membership: it goes on
// without dead workers (--min-workers below the count) or grows
// (--max-workers above it).
bool wantsLiveMembership(const DistributedConfig& config, int workers);
// Throws InputError naming the values when --ps-replicas cannot hold for a
// job of `servers` (more replicas than servers, or an async job).
void checkPsReplicas(const DistributedConfig& config, int servers);
// The quorum's options from the run's flags for a job of `workers`
// (cluster/quorum.hpp). Throws InputError naming the flag and the values
// when they cannot hold.
cluster::QuorumOptions quorumOptions(const DistributedConfig& config, int workers);

struct TrainConfig {
  std::string model = "cnn";    // a registered name, or a TorchScript file
  std::string loss = "cross_entropy";  // cross_entropy | mse | bce_with_logits | nll
  models::ModelOptions model_options;
  data::DatasetOptions dataset;
  int64_t batch_size = 64;
  int64_t accumulate = 1;  // micro-batches per update; sync happens on the last
  int64_t epochs = 1;
  int64_t max_steps = 0;  // > 0 overrides epochs
  uint64_t seed = 42;
  int threads = 0;        // torch intra-op threads; 0 = all cores (the CLI resolves its own default)
  int local_processes = 1;  // this job's processes on this host, as the CLI counted them; reported only
  int local_rank = 0;       // this worker's index among them (which GPU is its own)
  // auto | cpu | cuda | cuda:N (cluster/device_placement.hpp). Not part of
  // the run's identity: a run may resume on another device.
  std::string device = "auto";
  bool allow_shared_gpu = false;  // local ranks beyond the GPUs wrap around instead of failing
  Amp amp = Amp::kOff;
  bool channels_last = false;   // convolutional models: NHWC parameters and batches
  bool deterministic = false;   // deterministic kernels only (GPU): same seed, same bits
  // -1: one thread, or none (batches built inline) when the compute
  // threads take every core, where a prefetch thread only slows them.
  int prefetch_threads = -1;
  int prefetch_depth = 4;
  int64_t eval_every_steps = 0;  // 0: at every epoch end
  int64_t eval_batch_size = 500;
  int64_t log_every_steps = 50;
  // A collapsing loss (train/loss_watch.hpp) stops the run, naming the
  // flags to try; off: only a loss that is not finite does.
  Switch stop_on_collapse = Switch::kOn;
  int64_t checkpoint_every_steps = 0;  // 0: no step-count checkpoints
  double checkpoint_secs = 600;        // also checkpoint after this much training time (0: never)
  int keep_checkpoints = 5;            // periodic checkpoints kept (0: all)
  bool overwrite = false;              // clear out_dir instead of resuming from or refusing it
  int64_t debug_step_delay_ms = 0;     // sleep each step: makes a deliberate straggler for tests
  std::string emulate_compute;         // a GPU profile: forward and backward become timed waits
  bool timeline = false;               // write a Chrome-trace timeline of every step
  std::string out_dir = "runs/default";
  std::string resume_from;
  obs::ProgressStyle progress = obs::ProgressStyle::kPlain;  // not part of the run's identity
  OptimizerConfig optimizer;
  LrScheduleConfig lr;
  DistributedConfig distributed;
};

// What a caller of the trainer brings instead of naming it in the config.
struct SuppliedParts {
  bool model = false;
  bool data = false;
  bool loss = false;
};

// Checks ranges and combinations; throws InputError naming the flag. Names
// of parts the caller supplies are not checked.
void validate(const TrainConfig& config, SuppliedParts supplied = {});
// How the tasks talk (part of validate; the APIs' DistributedOptimizer and
// init run it on their options too), DiLoCo's settings included.
void validateDistributed(const DistributedConfig& d);
// DiLoCo's settings (part of validateDistributed); whether they apply at
// all (servers, --local-steps given) is the flags' check (cli/train_flags.cpp).
void validateDiloco(const DistributedConfig& d);
// DiLoCo with --fragments > 1 or --fragment-delay > 0.
bool streamsFragments(const DistributedConfig& d);
// How this run's PS pushes travel: --wire-dtype, or --push-bits.
inline PushFormat pushFormatOf(const DistributedConfig& d) { return {d.wire_dtype, d.push_bits}; }

// The stored fields (train/train_options.hpp's configFields) as JSON.
nlohmann::json toJson(const TrainConfig& config);
// Inverse of toJson; a field it lacks keeps its default. Throws InputError
// naming a mistyped field.
TrainConfig trainConfigFromJson(const nlohmann::json& j);

}  // namespace tandem::train
