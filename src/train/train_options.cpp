#include "train/train_options.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>

#include "cluster/host_aggregation.hpp"
#include "core/enum_names.hpp"
#include "core/error.hpp"
#include "train/config.hpp"

namespace tandem::train {
namespace {

using List = TrainOption::List;

constexpr ModeSet kAllReduceOnly = modeBit(Mode::AllReduce);
constexpr ModeSet kHostSums = modeBit(Mode::AllReduce) | modeBit(Mode::PsSync);

const char* const kCluster = "Cluster";
const char* const kServers = "Parameter server";
const char* const kDiloco = "DiLoCo (local steps, outer optimizer)";
const char* const kWire = "Wire format";
const char* const kLab = "Scale-out lab";

// "3x32x32" -> {"channels": 3, "height": 32, "width": 32}
nlohmann::json parseShape(std::string_view text) {
  long long c = 0, h = 0, w = 0;
  char x1 = 0, x2 = 0;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%lld%c%lld%c%lld", &c, &x1, &h, &x2, &w) != 5 || x1 != 'x' || x2 != 'x' || c <= 0 ||
      h <= 0 || w <= 0) {
    throw InputError(fmt::format("--synthetic-shape: '{}' is not CxHxW with positive sizes (e.g. 3x32x32)", text));
  }
  return {{"channels", c}, {"height", h}, {"width", w}};
}

// A row's field, its member path in TrainConfig spelled once: its JSON
// pointer ("dataset.name": "/dataset/name") and its typed read and write.
#define TANDEM_CONFIG_FIELD(path)                                              \
  .field = configPointer(#path),                                               \
  .read = [](const TrainConfig& c) -> nlohmann::json { return c.path; },       \
  .write = [](TrainConfig& c, const nlohmann::json& j) { j.get_to(c.path); }

std::string configPointer(std::string_view path) {
  std::string pointer = "/";
  for (const char ch : path) pointer += ch == '.' ? '/' : ch;
  return pointer;
}

std::vector<TrainOption> declare() {
  const auto on_off = enumChoices(kSwitchNames);
  return {
      {.flags = "--model", TANDEM_CONFIG_FIELD(model), .help = "model name (see `tandem models`), or a TorchScript file saved with torch.jit.save"},
      {.flags = "--loss", TANDEM_CONFIG_FIELD(loss), .help = "cross_entropy, mse, bce_with_logits (one-hot class targets) or nll (the model returns log-probabilities)"},
      {.flags = "--mlp-widths", TANDEM_CONFIG_FIELD(model_options.mlp_widths), .help = "hidden widths of the mlp model",
       .list = List::kIntegers},
      {.flags = "--dataset", TANDEM_CONFIG_FIELD(dataset.name), .help = "fashion-mnist, mnist-idx, cifar10, cifar100, imagefolder (--data-dir with train/<class>/ and val/<class>/ "
       "images) or synthetic", .keyword_name = "dataset"},
      {.flags = "--data-dir", TANDEM_CONFIG_FIELD(dataset.data_dir),
       .help = "dataset directory (default: the dataset's standard location)", .show_default = false},
      {.flags = "--augment", TANDEM_CONFIG_FIELD(dataset.augment), .help = "pad-4 random crop and horizontal flip on training images"},
      {.flags = "--image-size", TANDEM_CONFIG_FIELD(dataset.image_size), .help = "imagefolder: side of the square crop the model sees (the data opens before the model, so the default is "
       "ImageNet's 224)"},
      {.flags = "--normalize-mean", TANDEM_CONFIG_FIELD(dataset.normalize_mean),
       .help = "per-channel mean of pixel/255, comma-separated (default: computed from the training set; "
               "imagefolder: ImageNet's)",
       .show_default = false, .list = List::kNumbers},
      {.flags = "--normalize-std", TANDEM_CONFIG_FIELD(dataset.normalize_std),
       .help = "per-channel std of pixel/255, comma-separated (default: computed from the training set; "
               "imagefolder: ImageNet's)",
       .show_default = false, .list = List::kNumbers},
      {.flags = "--strict-data", TANDEM_CONFIG_FIELD(dataset.strict_data), .help = "a corrupt or non-image file is an error (default: skipped with one warning naming it)"},
      {.flags = "--synthetic-shape", TANDEM_CONFIG_FIELD(dataset.synthetic_shape), .help = "synthetic sample shape CxHxW",
       .parse = parseShape},
      {.flags = "--synthetic-classes", TANDEM_CONFIG_FIELD(dataset.synthetic_classes), .help = "synthetic class count"},
      {.flags = "--synthetic-size", TANDEM_CONFIG_FIELD(dataset.synthetic_train_size), .help = "synthetic training samples"},
      // Stored without a flag: a test's synthetic data set sets them.
      {TANDEM_CONFIG_FIELD(dataset.synthetic_test_size)},
      {TANDEM_CONFIG_FIELD(dataset.synthetic_seed)},
      {.flags = "--batch-size", TANDEM_CONFIG_FIELD(batch_size), .help = "samples per micro-batch per worker"},
      {.flags = "--accumulate", TANDEM_CONFIG_FIELD(accumulate), .help = "micro-batches per update; gradients sync on the last"},
      {.flags = "--epochs", TANDEM_CONFIG_FIELD(epochs), .help = "passes over the training set"},
      {.flags = "--max-steps", TANDEM_CONFIG_FIELD(max_steps),
       .help = "stop after this many global steps (overrides --epochs)", .show_default = false},
      {.flags = "--seed", TANDEM_CONFIG_FIELD(seed), .help = "seed for initialisation, shuffling and augmentation"},
      {.flags = "--threads", TANDEM_CONFIG_FIELD(threads), .help = "torch intra-op threads (0: OMP_NUM_THREADS if set, else cores / processes on this host)"},
      {.flags = "--device", TANDEM_CONFIG_FIELD(device), .help = "where a worker trains: auto (its local rank's GPU when any is visible, else the CPU), cpu, cuda (its local "
       "rank's GPU) or cuda:N (that GPU, shared on purpose); parameter servers stay on CPU"},
      {.flags = "--allow-shared-gpu", TANDEM_CONFIG_FIELD(allow_shared_gpu), .help = "with more workers on a host than GPUs, let local rank r share GPU r mod GPUs instead of failing"},
      {.flags = "--amp", TANDEM_CONFIG_FIELD(amp), .help = "mixed precision: off, bf16 (autocast forward in bfloat16), or fp16 (float16 with a dynamic loss scale that "
       "skips overflowing steps); weights, gradients and optimizer state stay float32", .choices = enumChoices(kAmpNames)},
      {.flags = "--channels-last", TANDEM_CONFIG_FIELD(channels_last), .help = "convolutional models: keep 4-d parameters and batches in channels-last (NHWC) layout, which GPU "
       "convolutions run faster in (standalone)"},
      {.flags = "--deterministic", TANDEM_CONFIG_FIELD(deterministic), .help = "GPU: deterministic kernels only (cuDNN without benchmarking, cuBLAS with a fixed workspace), so that the "
       "same seed gives the same bits; an operation without a deterministic kernel is an error naming it. The CPU "
       "path is deterministic already"},
      {.flags = "--prefetch-threads", TANDEM_CONFIG_FIELD(prefetch_threads), .help = "input pipeline threads (0: build batches inline; -1: 1, or 0 when the compute threads take every core)"},
      {.flags = "--prefetch-depth", TANDEM_CONFIG_FIELD(prefetch_depth), .help = "batches the input pipeline may run ahead"},
      {.flags = "--optimizer", TANDEM_CONFIG_FIELD(optimizer.name), .help = "sgd, adam, adamw or rmsprop",
       .choices = optim::optimizerNames(), .keyword_name = "optimizer"},
      {.flags = "--lr", TANDEM_CONFIG_FIELD(optimizer.lr), .help = "base learning rate"},
      {.flags = "--momentum", TANDEM_CONFIG_FIELD(optimizer.momentum),
       .help = "momentum of sgd (default 0.9) or rmsprop (default 0)", .show_default = false},
      {.flags = "--nesterov", TANDEM_CONFIG_FIELD(optimizer.nesterov), .help = "Nesterov momentum (SGD)"},
      {.flags = "--weight-decay", TANDEM_CONFIG_FIELD(optimizer.weight_decay),
       .help = "L2 weight decay (adamw: decoupled decay, default 0.01; others default 0)", .show_default = false},
      {.flags = "--adam-beta1", TANDEM_CONFIG_FIELD(optimizer.beta1), .help = "beta1 of adam and adamw"},
      {.flags = "--adam-beta2", TANDEM_CONFIG_FIELD(optimizer.beta2), .help = "beta2 of adam and adamw"},
      {.flags = "--eps,--adam-eps", TANDEM_CONFIG_FIELD(optimizer.eps), .help = "epsilon of adam, adamw and rmsprop"},
      {.flags = "--rmsprop-alpha", TANDEM_CONFIG_FIELD(optimizer.alpha), .help = "smoothing constant of rmsprop"},
      {.flags = "--rmsprop-centered", TANDEM_CONFIG_FIELD(optimizer.centered), .help = "rmsprop normalised by the gradient's variance"},
      {.flags = "--lr-schedule", TANDEM_CONFIG_FIELD(lr.kind), .help = "constant, piecewise or cosine",
       .choices = enumChoices(kLrScheduleNames), .keyword_name = "lr_schedule"},
      {.flags = "--lr-boundaries", TANDEM_CONFIG_FIELD(lr.boundaries), .help = "piecewise boundaries (comma-separated)",
       .show_default = false, .list = List::kIntegers, .keyword_name = "lr_boundaries"},
      {.flags = "--lr-values", TANDEM_CONFIG_FIELD(lr.values), .help = "piecewise rates, one more than boundaries",
       .show_default = false, .list = List::kNumbers, .keyword_name = "lr_values"},
      {.flags = "--lr-boundary-unit", TANDEM_CONFIG_FIELD(lr.unit), .help = "piecewise boundaries in 'step' or 'epoch'",
       .choices = enumChoices(kLrUnitNames), .keyword_name = "lr_boundary_unit"},
      {.flags = "--min-lr", TANDEM_CONFIG_FIELD(lr.min_lr), .help = "cosine floor"},
      {.flags = "--warmup-steps", TANDEM_CONFIG_FIELD(lr.warmup_steps), .help = "linear warmup steps before the schedule"},
      {.flags = "--lr-scaling", TANDEM_CONFIG_FIELD(lr.scaling),
       .help = "none, or linear: rates x (workers x accumulate), warming up from the unscaled rate",
       .choices = enumChoices(kLrScalingNames), .keyword_name = "lr_scaling"},
      {.flags = "--eval-every", TANDEM_CONFIG_FIELD(eval_every_steps), .help = "evaluate every N steps (0: at each epoch end)"},
      {.flags = "--eval-batch-size", TANDEM_CONFIG_FIELD(eval_batch_size), .help = "evaluation batch size"},
      {.flags = "--log-every", TANDEM_CONFIG_FIELD(log_every_steps), .help = "write a metrics line every N steps"},
      {.flags = "--stop-on-collapse", TANDEM_CONFIG_FIELD(stop_on_collapse),
       .help = "on stops the run (exit 1) once the mean loss of the last 10 steps climbs back above the first 10 "
               "steps' after having fallen below 0.7 of it, naming the flags to try; a loss that is not finite "
               "stops it either way",
       .choices = on_off},
      {.flags = "--checkpoint-every", TANDEM_CONFIG_FIELD(checkpoint_every_steps), .help = "also checkpoint every N steps to OUT/checkpoints/ (the final one is always OUT/checkpoint.ckpt)"},
      {.flags = "--checkpoint-secs", TANDEM_CONFIG_FIELD(checkpoint_secs), .help = "also checkpoint every N seconds of training (0: never)"},
      {.flags = "--keep-checkpoints", TANDEM_CONFIG_FIELD(keep_checkpoints), .help = "periodic checkpoints kept in OUT/checkpoints/ (0: all)"},
      {.flags = "--out", TANDEM_CONFIG_FIELD(out_dir), .help = "run directory for metrics.jsonl, summary.json, checkpoints"},
      {.flags = "--bind", TANDEM_CONFIG_FIELD(distributed.bind),
       .help = "address this task's ports listen on (the coordinator, a PS); default: the address its host name "
               "resolves to here; 0.0.0.0: every interface",
       .group = kCluster, .modes = kDistributedModes, .show_default = false},
      {.flags = "--bucket-mb", TANDEM_CONFIG_FIELD(distributed.bucket_mb),
       .help = "all-reduce gradient bucket cap in MiB; 0: about 16 buckets of the model, 0.25-4 MiB each",
       .group = kCluster, .modes = kAllReduceOnly},
      {.flags = "--gpu-collective", TANDEM_CONFIG_FIELD(distributed.gpu_collective),
       .help = "GPU workers' all-reduce: nccl sums buckets in device memory; gloo copies them to the host and sums "
               "there; auto: nccl unless NCCL is missing or two workers share a GPU",
       .group = kCluster, .modes = kAllReduceOnly, .choices = enumChoices(kGpuCollectiveNames)},
      {.flags = "--peer-timeout", TANDEM_CONFIG_FIELD(distributed.peer_timeout_s),
       .help = "seconds a collective waits for a peer", .group = kCluster, .modes = kDistributedModes},
      {.flags = "--rendezvous-timeout", TANDEM_CONFIG_FIELD(distributed.rendezvous_timeout_s),
       .help = "seconds to wait for every task to join", .group = kCluster, .modes = kDistributedModes},
      {.flags = "--heartbeat-timeout", TANDEM_CONFIG_FIELD(distributed.heartbeat_timeout_s),
       .help = "seconds without an answer from a parameter server's host, or without a heartbeat from a worker "
               "of a job with --min-workers, before it is named dead (a process that exits is named at once)",
       .group = kCluster, .modes = kDistributedModes},
      {.flags = "--min-workers", TANDEM_CONFIG_FIELD(distributed.min_workers),
       .help = "all-reduce: the job goes on without a worker that dies while at least N remain; the survivors "
               "agree at the next step boundary and redo that step (0: every worker, so any death ends the job)",
       .group = kCluster, .modes = kAllReduceOnly, .strict = true},
      {.flags = "--max-workers", TANDEM_CONFIG_FIELD(distributed.max_workers),
       .help = "all-reduce: the job grows up to N workers; a worker whose --task-index is beyond --worker-hosts "
               "(launch --host-discovery-script starts them) joins the running job at a step boundary with a "
               "peer's state (0: the starting size)",
       .group = kCluster, .modes = kAllReduceOnly, .strict = true},
      {.flags = "--restart-wait", TANDEM_CONFIG_FIELD(distributed.restart_wait_s),
       .help = "when the job loses a task: 0, exit 1; N, start this task again in place and wait up to N seconds "
               "for the job's next start, every task continuing from the newest checkpoint (a server restarted by "
               "hand rejoins this way)",
       .group = kCluster, .modes = kDistributedModes},
      {.flags = "--verify-replicas-every", TANDEM_CONFIG_FIELD(distributed.verify_replicas_every),
       .help = "compare parameter checksums across workers every N steps (0: never)", .group = kCluster,
       .modes = kAllReduceOnly, .strict = true},
      {.flags = "--ps-mode", TANDEM_CONFIG_FIELD(distributed.ps_mode),
       .help = "sync (mean of every worker per step) or async (each push applied as it comes); --staleness k bounds either",
       .group = kServers, .modes = kServerModes, .strict = true, .choices = psModeChoices()},
      {.flags = "--staleness", TANDEM_CONFIG_FIELD(distributed.staleness),
       .help = "bounded staleness: a worker runs at most k steps ahead of the slowest (0 = sync)", .group = kServers,
       .modes = kServerModes, .strict = true, .show_default = false},
      {.flags = "--delay-compensation", TANDEM_CONFIG_FIELD(distributed.delay_compensation),
       .help = "async and bounded staleness: DC-ASGD's lambda0 (its paper: 2 adaptive, 0.04 constant; 0: off); servers "
               "correct each push towards the values now held, keeping each worker's last pulled values",
       .group = kServers, .modes = kServerModes, .strict = true, .show_default = false},
      {.flags = "--delay-compensation-form", TANDEM_CONFIG_FIELD(distributed.delay_compensation_form),
       .help = "adaptive (lambda0 over each value's root mean square gradient, one more float per value) or constant "
               "(lambda0 itself; the cheaper apply)",
       .group = kServers, .modes = kServerModes, .strict = true, .choices = enumChoices(ps::kDelayFormNames)},
      {.flags = "--staleness-lr", TANDEM_CONFIG_FIELD(distributed.staleness_lr),
       .help = "async and bounded staleness: on divides each push's rate by its staleness (the updates its chunk "
               "took since its worker pulled), as in staleness-aware async SGD; auto: on there, but for DiLoCo "
               "(whose pushes are changes, not gradients); off: every push at the full rate",
       .group = kServers, .modes = kServerModes, .strict = true, .choices = enumChoices(kAutoSwitchNames)},
      {.flags = "--async-momentum-correction", TANDEM_CONFIG_FIELD(distributed.async_momentum_correction),
       .help = "with staleness-aware rates: the servers lower the momentum (Adam's beta1) for the momentum the "
               "measured staleness s adds, keeping (1 - momentum)(1 + s) of each step: 0.9 acts as 0.6 at s = 3; "
               "auto: on where staleness-aware rates are, but for --delay-compensation",
       .group = kServers, .modes = kServerModes, .strict = true, .choices = enumChoices(kAutoSwitchNames)},
      {.flags = "--local-steps", TANDEM_CONFIG_FIELD(distributed.local_steps),
       .help = "DiLoCo: each worker takes H steps with its own optimizer, then the servers apply --outer-optimizer "
               "to the workers' mean change since the last global model (sync parameter servers; 0: off)",
       .group = kDiloco, .modes = kServerModes, .strict = true, .show_default = false},
      {.flags = "--outer-optimizer", TANDEM_CONFIG_FIELD(distributed.outer_optimizer),
       .help = "DiLoCo: the servers' optimizer for the workers' mean change: nesterov or sgd (heavy-ball momentum)",
       .group = kDiloco, .modes = kServerModes, .strict = true, .choices = {"nesterov", "sgd"}},
      {.flags = "--outer-lr", TANDEM_CONFIG_FIELD(distributed.outer_lr), .help = "DiLoCo: the outer optimizer's rate",
       .group = kDiloco, .modes = kServerModes, .strict = true},
      {.flags = "--outer-momentum", TANDEM_CONFIG_FIELD(distributed.outer_momentum),
       .help = "DiLoCo: the outer optimizer's momentum", .group = kDiloco, .modes = kServerModes, .strict = true},
      {.flags = "--fragments", TANDEM_CONFIG_FIELD(distributed.fragments),
       .help = "streaming DiLoCo: the model's chunks in F fragments, each exchanged once every --local-steps at "
               "staggered steps, so that each exchange carries 1/F of the model (sync; 1: all at once)",
       .group = kDiloco, .modes = kServerModes, .strict = true},
      {.flags = "--fragment-delay", TANDEM_CONFIG_FIELD(distributed.fragment_delay),
       .help = "streaming DiLoCo: steps each fragment's exchange overlaps before it is merged (below "
               "--local-steps / --fragments)",
       .group = kDiloco, .modes = kServerModes, .strict = true},
      {.flags = "--fragment-mix", TANDEM_CONFIG_FIELD(distributed.fragment_mix),
       .help = "streaming DiLoCo: a merged fragment is mix * local + (1 - mix) * the new global values",
       .group = kDiloco, .modes = kServerModes, .strict = true},
      {.flags = "--ps-replicas", TANDEM_CONFIG_FIELD(distributed.ps_replicas),
       .help = "each chunk lives on this many servers (2: its own and the next), every push applied on both in one "
               "order (async and SSP: the first forwards what it applied), so that the job goes on, losing no "
               "update, when one server dies",
       .group = kServers, .modes = kServerModes, .strict = true},
      {.flags = "--ps-chunk-mb", TANDEM_CONFIG_FIELD(distributed.ps_chunk_mb),
       .help = "parameter chunk size spread over the servers; 0: about 16 chunks a server, at least 32, 16 KiB-4 "
               "MiB each",
       .group = kServers, .modes = kServerModes},
      {.flags = "--hierarchical", TANDEM_CONFIG_FIELD(distributed.hierarchical),
       .help = "across hosts (all-reduce and sync PS): auto sums each host's workers' gradients over loopback "
               "first, so each host's link carries them once (BytePS-style); off: every worker sends its own",
       .group = kServers, .modes = kHostSums, .choices = enumChoices(cluster::kHostAggregationNames)},
      {.flags = "--priority", TANDEM_CONFIG_FIELD(distributed.priority),
       .help = "PS: on sends queued pushes first layers first (two chunks in flight per server) and starts the next "
               "forward as its first layers' parameters arrive; off sends in backward's order",
       .group = kServers, .modes = kServerModes, .choices = on_off},
      {.flags = "--ps-shared-memory", TANDEM_CONFIG_FIELD(distributed.shared_memory),
       .help = "PS: on lets servers on a worker's host read its pushes from, and write its pulls into, the "
               "worker's shared memory, skipping the socket's copies; off sends every byte through the socket",
       .group = kServers, .modes = kServerModes, .choices = on_off},
      {.flags = "--ps-threads", TANDEM_CONFIG_FIELD(distributed.ps_threads),
       .help = "optimizer apply threads per server (0: all cores)", .group = kServers, .modes = kServerModes},
      {.flags = "--wire-dtype", TANDEM_CONFIG_FIELD(distributed.wire_dtype),
       .help = "how gradient buckets and PS chunks travel: fp32, fp16 or bf16 (half the bytes; master weights and "
               "optimizer state stay float32)",
       .group = kWire, .modes = kDistributedModes, .choices = enumChoices(kWireDtypeNames)},
      {.flags = "--error-feedback", TANDEM_CONFIG_FIELD(distributed.error_feedback),
       .help = "with --wire-dtype fp16|bf16: carry each gradient's rounding into its next push or all-reduce",
       .group = kWire, .modes = kDistributedModes},
      {.flags = "--push-bits", TANDEM_CONFIG_FIELD(distributed.push_bits),
       .help = "PS: 8 or 4 sends each push (a gradient, or DiLoCo's outer gradient) in that many bits a value, with "
               "a float32 scale per 128 values, and carries what that lost into the chunk's next push; pulls keep "
               "--wire-dtype (0: pushes as --wire-dtype)",
       .group = kWire, .modes = kServerModes, .strict = true, .show_default = false},
      {.flags = "--emulate-compute", TANDEM_CONFIG_FIELD(emulate_compute),
       .help = "a GPU profile (JSON, profiles/): forward and backward become timed waits shaped like the model's "
               "FLOPs, everything else stays real",
       .group = kLab, .show_default = false},
      {.flags = "--timeline", TANDEM_CONFIG_FIELD(timeline),
       .help = "write OUT/timeline-worker-N.json (Chrome trace, Perfetto): each step's phases, bucket all-reduces, "
               "emulated layers; launch merges them into OUT/timeline.json",
       .group = kLab},
      {.flags = "--debug-step-delay-ms", TANDEM_CONFIG_FIELD(debug_step_delay_ms),
       .help = "sleep this long every step: a deliberate straggler for testing", .group = "Debugging",
       .show_default = false},
  };
}

template <class T>
T parseInteger(const TrainOption& o, std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw InputError(fmt::format("{}: '{}' is not {}", o.name(), text,
                                 std::is_signed_v<T> ? "an integer" : "a non-negative integer"));
  }
  return value;
}

double parseNumber(const TrainOption& o, std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw InputError(fmt::format("{}: '{}' is not a number", o.name(), text));
  }
  return value;
}

}  // namespace

std::string_view TrainOption::name() const {
  const std::string_view all = flags;
  return all.substr(0, all.find(','));
}

std::string_view TrainOption::keyword() const {
  if (!keyword_name.empty()) return keyword_name;
  const std::string_view f = field;
  return f.substr(f.rfind('/') + 1);
}

bool TrainOption::hasFlag(std::string_view flag) const {
  std::string_view all = flags;
  while (!all.empty()) {
    const size_t comma = std::min(all.find(','), all.size());
    if (all.substr(0, comma) == flag) return true;
    all.remove_prefix(std::min(comma + 1, all.size()));
  }
  return false;
}

const std::vector<TrainOption>& configFields() {
  static const std::vector<TrainOption> fields = declare();
  return fields;
}

const std::vector<TrainOption>& trainOptions() {
  static const std::vector<TrainOption> options = [] {
    std::vector<TrainOption> flagged;
    for (const auto& f : configFields()) {
      if (!f.flags.empty()) flagged.push_back(f);
    }
    return flagged;
  }();
  return options;
}

nlohmann::json toJson(const TrainConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : configFields()) j[nlohmann::json::json_pointer(f.field)] = f.read(config);
  return j;
}

TrainConfig trainConfigFromJson(const nlohmann::json& j) {
  TrainConfig config;
  for (const auto& f : configFields()) {
    const nlohmann::json::json_pointer pointer(f.field);
    if (!j.contains(pointer)) continue;  // older configs lack newer fields: their defaults
    try {
      f.write(config, j.at(pointer));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("run config: {}: {}", f.field, e.what()));
    }
  }
  return config;
}

const TrainOption& trainOption(std::string_view field) {
  for (const auto& o : trainOptions()) {
    if (o.field == field) return o;
  }
  throw Error(fmt::format("no train option sets {}", field));
}

nlohmann::json parseOptionValue(const TrainOption& o, const nlohmann::json& current,
                                const std::vector<std::string>& texts) {
  if (current.is_boolean()) return true;  // a flag: given is on
  if (texts.empty()) throw InputError(fmt::format("{}: needs a value", o.name()));
  if (o.list != List::kNone) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& text : texts) {
      size_t start = 0;
      while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const std::string_view item = std::string_view(text).substr(start, comma - start);
        if (o.list == List::kIntegers) {
          values.push_back(parseInteger<int64_t>(o, item));
        } else {
          values.push_back(parseNumber(o, item));
        }
        start = comma + 1;
      }
    }
    return values;
  }
  if (texts.size() > 1) throw InputError(fmt::format("{}: takes one value, got {}", o.name(), texts.size()));
  const std::string& text = texts.front();
  if (o.parse != nullptr) return o.parse(text);
  if (!o.choices.empty()) {
    if (std::find(o.choices.begin(), o.choices.end(), text) == o.choices.end()) {
      throw InputError(fmt::format("{}: expected {}, got '{}'", o.name(), choicesText(o.choices), text));
    }
    return text;
  }
  if (current.is_number_unsigned()) return parseInteger<uint64_t>(o, text);
  if (current.is_number_integer()) return parseInteger<int64_t>(o, text);
  if (current.is_number_float()) return parseNumber(o, text);
  if (current.is_string()) return text;
  throw Error(fmt::format("{}: its field {} holds {}, which no text parses into", o.name(), o.field,
                          current.type_name()));
}

void requireApplies(const TrainOption& o, Mode mode) {
  if (!o.strict || (o.modes & modeBit(mode)) != 0) return;
  if (o.modes == kServerModes) {
    throw InputError(fmt::format("{}: only applies with parameter servers, and this run has none (add PS tasks: "
                                 "--ps_hosts, a TF_CONFIG ps list, or `tandem launch --ps K`)",
                                 o.name()));
  }
  if (o.modes == kAllReduceOnly) {
    throw InputError(fmt::format("{}: applies in all-reduce mode only, and this run is {}{}", o.name(),
                                 modeName(mode),
                                 usesServers(mode) ? " (every worker pulls the same server copy)" : ""));
  }
  throw InputError(fmt::format("{}: does not apply to a {} run", o.name(), modeName(mode)));
}

}  // namespace tandem::train
