#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <optional>
#include <thread>

#include "cli/commands.hpp"
#include "cluster/cluster_spec.hpp"
#include "cluster/local_address.hpp"
#include "cluster/device_placement.hpp"
#include "cluster/local_share.hpp"
#include "cluster/process_setup.hpp"
#include "core/logging.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "obs/progress.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/run_directory.hpp"
#include "cli/ps_task.hpp"
#include "cli/restart_in_place.hpp"
#include "train/strategy_factory.hpp"
#include "train/trainer.hpp"
#include "core/stop_request.hpp"
#include "net/job_security.hpp"

namespace tandem::cli {
namespace {

// SIGINT/SIGTERM set the process's stop request (core/stop_request): the
// trainer checks it between steps, so a stopped run still leaves a
// checkpoint and summary behind. A second signal kills.
void onStopSignal(int signal) {
  if (stopFlag().exchange(true)) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

// "3x32x32" -> {3, 32, 32}
data::SampleShape parseShape(const std::string& text) {
  data::SampleShape shape;
  char x1 = 0, x2 = 0;
  long long c = 0, h = 0, w = 0;
  if (std::sscanf(text.c_str(), "%lld%c%lld%c%lld", &c, &x1, &h, &x2, &w) != 5 || x1 != 'x' || x2 != 'x' || c <= 0 ||
      h <= 0 || w <= 0) {
    throw InputError(fmt::format("--synthetic-shape: '{}' is not CxHxW with positive sizes (e.g. 3x32x32)", text));
  }
  shape.channels = c;
  shape.height = h;
  shape.width = w;
  return shape;
}

using GivenFields = std::vector<std::pair<CLI::Option*, std::string>>;

// --resume CKPT: the checkpoint's run config is the default for every flag
// not given. A given flag must agree with it where it shapes the trajectory
// (only the base learning rate may change, and that is logged).
void applyResumeDefaults(train::TrainConfig& config, const GivenFields& fields) {
  const std::string checkpoint = config.resume_from;
  const nlohmann::json stored = train::LoadedCheckpoint(checkpoint).meta().config;
  std::vector<std::string> given;
  for (const auto& [option, pointer] : fields) {
    if (option->count() > 0) given.push_back(pointer);
  }
  const nlohmann::json flags = train::toJson(config);
  nlohmann::json merged = train::mergeGivenFields(stored, flags, given);
  // --epochs alone means the stored --max-steps no longer applies, and the
  // stored thread count was this host's share then: plan it anew unless given.
  const auto has = [&given](const char* p) { return std::find(given.begin(), given.end(), p) != given.end(); };
  if (has("/epochs") && !has("/max_steps")) merged["max_steps"] = 0;
  if (!has("/threads")) merged["threads"] = 0;
  if (auto d = train::firstTrajectoryDifference(stored, merged, /*allow_lr=*/true)) {
    throw InputError(fmt::format("--resume {}: {} differs: checkpoint has {}, the flags give {}; leave the flag out "
                                 "to keep the checkpoint's value",
                                 checkpoint, d->field, d->stored, d->current));
  }
  const obs::ProgressStyle progress = config.progress;
  const int local_processes = config.local_processes;
  config = train::trainConfigFromJson(merged);
  config.resume_from = checkpoint;
  config.progress = progress;
  config.local_processes = local_processes;
  const double stored_lr = stored.at("optimizer").value("lr", config.optimizer.lr);
  if (stored_lr != config.optimizer.lr) {
    TANDEM_LOG_INFO("--resume: learning rate changed from {} to {}", stored_lr, config.optimizer.lr);
  }
}

// A flag that would change nothing is a mistake the user should hear about.
void rejectIgnoredFlags(const CLI::App& cmd, const std::optional<cluster::ClusterSpec>& spec,
                        const train::TrainConfig& config) {
  const bool ps = spec && spec->numServers() > 0;
  for (const char* flag : {"--ps-mode", "--staleness"}) {
    if (!ps && cmd.count(flag) > 0) {
      throw InputError(fmt::format("{}: only applies with parameter servers, and this run has none (add PS tasks: "
                                   "--ps_hosts, a TF_CONFIG ps list, or `tandem launch --ps K`)",
                                   flag));
    }
  }
  if (ps && config.distributed.verify_replicas_every > 0) {
    throw InputError("--verify-replicas-every: replicas are compared in all-reduce mode only; with parameter "
                     "servers every worker pulls the same server copy");
  }
  if (cmd.count("--max-steps") > 0 && config.max_steps <= 0) {
    throw InputError(fmt::format("--max-steps: must be >= 1, got {} (leave it out to train for --epochs)",
                                 config.max_steps));
  }
}

}  // namespace

Command addTrainCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a model: standalone, or as one task of a cluster (cluster flags, TF_CONFIG, mpirun, srun or "
               "torchrun environment)");
  auto config = std::make_shared<train::TrainConfig>();
  auto synthetic_shape = std::make_shared<std::string>("3x32x32");
  auto& c = *config;
  // Which run-config field each flag sets (a JSON pointer into toJson), so
  // that --resume can tell the flags given from the stored defaults.
  auto fields = std::make_shared<GivenFields>();
  auto field = [fields](const char* pointer, CLI::Option* option) {
    fields->emplace_back(option, pointer);
    return option;
  };
  field("/model", cmd->add_option("--model", c.model,
                                  "model name (see `tandem models`), or a TorchScript file saved with torch.jit.save"))
      ->capture_default_str();
  field("/loss", cmd->add_option("--loss", c.loss,
                                 "cross_entropy, mse, bce_with_logits (one-hot class targets) or nll (the model "
                                 "returns log-probabilities)"))
      ->capture_default_str();
  field("/model_options/mlp_widths",
        cmd->add_option("--mlp-widths", c.model_options.mlp_widths, "hidden widths of the mlp model"))
      ->delimiter(',')->capture_default_str();
  field("/dataset/name",
        cmd->add_option("--dataset", c.dataset.name,
                        "fashion-mnist, mnist-idx, cifar10, cifar100, imagefolder (--data-dir with train/<class>/ "
                        "and val/<class>/ images) or synthetic"))
      ->capture_default_str();
  field("/dataset/data_dir",
        cmd->add_option("--data-dir", c.dataset.data_dir, "dataset directory (default: the "
                        "dataset's standard location)"));
  field("/dataset/augment",
        cmd->add_flag("--augment", c.dataset.augment, "pad-4 random crop and horizontal flip on training images"));
  field("/dataset/image_size",
        cmd->add_option("--image-size", c.dataset.image_size, "imagefolder: side of the square crop the model sees "
                        "(the data opens before the model, so the default is ImageNet's 224)"))
      ->capture_default_str();
  field("/dataset/normalize_mean",
        cmd->add_option("--normalize-mean", c.dataset.normalize_mean, "per-channel mean of pixel/255, comma-separated "
                        "(default: computed from the training set; imagefolder: ImageNet's)"))
      ->delimiter(',');
  field("/dataset/normalize_std",
        cmd->add_option("--normalize-std", c.dataset.normalize_std, "per-channel std of pixel/255, comma-separated "
                        "(default: computed from the training set; imagefolder: ImageNet's)"))
      ->delimiter(',');
  field("/dataset/strict_data",
        cmd->add_flag("--strict-data", c.dataset.strict_data, "a corrupt or non-image file is an error (default: "
                      "skipped with one warning naming it)"));
  field("/dataset/synthetic_shape",
        cmd->add_option("--synthetic-shape", *synthetic_shape, "synthetic sample shape CxHxW"))->capture_default_str();
  field("/dataset/synthetic_classes",
        cmd->add_option("--synthetic-classes", c.dataset.synthetic_classes, "synthetic class count"))
      ->capture_default_str();
  field("/dataset/synthetic_train_size",
        cmd->add_option("--synthetic-size", c.dataset.synthetic_train_size, "synthetic training samples"))
      ->capture_default_str();
  field("/batch_size",
        cmd->add_option("--batch-size", c.batch_size, "samples per micro-batch per worker"))->capture_default_str();
  field("/accumulate",
        cmd->add_option("--accumulate", c.accumulate, "micro-batches per update; gradients sync on the last"))
      ->capture_default_str();
  auto* epochs = field("/epochs",
        cmd->add_option("--epochs", c.epochs, "passes over the training set"))->capture_default_str();
  field("/max_steps",
        cmd->add_option("--max-steps", c.max_steps, "stop after this many global steps (overrides --epochs)"))
      ->excludes(epochs);
  field("/seed",
        cmd->add_option("--seed", c.seed, "seed for initialisation, shuffling and augmentation"))
      ->capture_default_str();
  field("/threads",
        cmd->add_option("--threads", c.threads, "torch intra-op threads (0: OMP_NUM_THREADS if set, "
                        "else cores / processes on this host)"))
      ->capture_default_str();
  field("/device",
        cmd->add_option("--device", c.device, "where a worker trains: auto (its local rank's GPU when any is "
                        "visible, else the CPU), cpu, cuda (its local rank's GPU) or cuda:N (that GPU, shared on "
                        "purpose); parameter servers stay on CPU"))
      ->capture_default_str();
  field("/allow_shared_gpu",
        cmd->add_flag("--allow-shared-gpu", c.allow_shared_gpu, "with more workers on a host than GPUs, let local "
                      "rank r share GPU r mod GPUs instead of failing"));
  field("/amp",
        cmd->add_option("--amp", c.amp, "mixed precision: off, bf16 (autocast forward in bfloat16), or fp16 "
                        "(float16 with a dynamic loss scale that skips overflowing steps); weights, gradients and "
                        "optimizer state stay float32"))
      ->capture_default_str();
  field("/channels_last",
        cmd->add_flag("--channels-last", c.channels_last, "convolutional models: keep 4-d parameters and batches in "
                      "channels-last (NHWC) layout, which GPU convolutions run faster in (standalone)"));
  field("/deterministic",
        cmd->add_flag("--deterministic", c.deterministic, "GPU: deterministic kernels only (cuDNN without "
                      "benchmarking, cuBLAS with a fixed workspace), so that the same seed gives the same bits; an "
                      "operation without a deterministic kernel is an error naming it. The CPU path is "
                      "deterministic already"));
  field("/prefetch_threads",
        cmd->add_option("--prefetch-threads", c.prefetch_threads, "input pipeline threads (0: build batches inline; -1: 1, or 0 when the compute threads take every core)"))
      ->capture_default_str();
  field("/prefetch_depth",
        cmd->add_option("--prefetch-depth", c.prefetch_depth, "batches the input pipeline may run ahead"))
      ->capture_default_str();
  field("/optimizer/name", cmd->add_option("--optimizer", c.optimizer.name, "sgd, adam, adamw or rmsprop"))
      ->capture_default_str();
  field("/optimizer/lr", cmd->add_option("--lr", c.optimizer.lr, "base learning rate"))->capture_default_str();
  field("/optimizer/momentum", cmd->add_option("--momentum", c.optimizer.momentum,
                                               "momentum of sgd (default 0.9) or rmsprop (default 0)"));
  field("/optimizer/nesterov", cmd->add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum (SGD)"));
  field("/optimizer/weight_decay",
        cmd->add_option("--weight-decay", c.optimizer.weight_decay,
                        "L2 weight decay (adamw: decoupled decay, default 0.01; others default 0)"));
  field("/optimizer/beta1",
        cmd->add_option("--adam-beta1", c.optimizer.beta1, "beta1 of adam and adamw"))->capture_default_str();
  field("/optimizer/beta2",
        cmd->add_option("--adam-beta2", c.optimizer.beta2, "beta2 of adam and adamw"))->capture_default_str();
  field("/optimizer/eps", cmd->add_option("--eps,--adam-eps", c.optimizer.eps, "epsilon of adam, adamw and rmsprop"))
      ->capture_default_str();
  field("/optimizer/alpha", cmd->add_option("--rmsprop-alpha", c.optimizer.alpha, "smoothing constant of rmsprop"))
      ->capture_default_str();
  field("/optimizer/centered",
        cmd->add_flag("--rmsprop-centered", c.optimizer.centered, "rmsprop normalised by the gradient's variance"));
  field("/lr/kind",
        cmd->add_option("--lr-schedule", c.lr.kind, "constant, piecewise or cosine"))->capture_default_str();
  field("/lr/boundaries",
        cmd->add_option("--lr-boundaries", c.lr.boundaries, "piecewise boundaries (comma-separated)"))->delimiter(',');
  field("/lr/values",
        cmd->add_option("--lr-values", c.lr.values, "piecewise rates, one more than boundaries"))->delimiter(',');
  field("/lr/unit",
        cmd->add_option("--lr-boundary-unit", c.lr.unit, "piecewise boundaries in 'step' or 'epoch'"))
      ->capture_default_str();
  field("/lr/min_lr", cmd->add_option("--min-lr", c.lr.min_lr, "cosine floor"))->capture_default_str();
  field("/lr/warmup_steps",
        cmd->add_option("--warmup-steps", c.lr.warmup_steps, "linear warmup steps before the schedule"))
      ->capture_default_str();
  field("/lr/scaling", cmd->add_option("--lr-scaling", c.lr.scaling,
                  "none, or linear: rates x (workers x accumulate), warming up from the unscaled rate"))
      ->capture_default_str();
  field("/eval_every_steps",
        cmd->add_option("--eval-every", c.eval_every_steps, "evaluate every N steps (0: at each epoch end)"))
      ->capture_default_str();
  field("/eval_batch_size",
        cmd->add_option("--eval-batch-size", c.eval_batch_size, "evaluation batch size"))->capture_default_str();
  field("/log_every_steps",
        cmd->add_option("--log-every", c.log_every_steps, "write a metrics line every N steps"))->capture_default_str();
  field("/checkpoint_every_steps", cmd->add_option("--checkpoint-every", c.checkpoint_every_steps,
                  "also checkpoint every N steps to OUT/checkpoints/ (the final one is always OUT/checkpoint.ckpt)"))
      ->capture_default_str();
  cmd->add_option("--resume", c.resume_from,
                  "continue the exact trajectory from this checkpoint; its run's flags are the defaults");
  field("/checkpoint_secs", cmd->add_option("--checkpoint-secs", c.checkpoint_secs,
                                            "also checkpoint every N seconds of training (0: never)"))
      ->capture_default_str();
  field("/keep_checkpoints", cmd->add_option("--keep-checkpoints", c.keep_checkpoints,
                                             "periodic checkpoints kept in OUT/checkpoints/ (0: all)"))
      ->capture_default_str();
  cmd->add_flag("--overwrite", c.overwrite, "clear --out first, even if it holds another run (never resume from it)");
  field("/out_dir", cmd->add_option("--out", c.out_dir, "run directory for metrics.jsonl, summary.json, checkpoints"))
      ->capture_default_str();
  auto cluster_flags = std::make_shared<cluster::ClusterFlags>();
  auto& f = *cluster_flags;
  const char* cluster_group = "Cluster";
  cmd->add_option("--worker-hosts", f.worker_hosts, "comma-separated host:port of every worker; worker 0 coordinates")
      ->group(cluster_group);
  cmd->add_option("--ps-hosts", f.ps_hosts, "comma-separated host:port of every parameter server")->group(cluster_group);
  field("/distributed/bind",
        cmd->add_option("--bind", c.distributed.bind,
                        "address this task's ports listen on (the coordinator, a PS); default: the address its host "
                        "name resolves to here; 0.0.0.0: every interface"))
      ->group(cluster_group);
  cmd->add_option("--job-name", f.job_name, "this task's job: worker or ps")->group(cluster_group);
  cmd->add_option("--task-index,--task-id", f.task_index, "this task's index within its job")->group(cluster_group);
  cmd->add_option("--coordinator", f.coordinator, "host:port of worker 0's store (needed under mpirun and srun)")
      ->group(cluster_group);
  field("/distributed/bucket_mb",
        cmd->add_option("--bucket-mb", c.distributed.bucket_mb, "all-reduce gradient bucket cap in MiB; 0: about 16 buckets of the model, 0.25-4 MiB each"))
      ->capture_default_str()->group(cluster_group);
  field("/distributed/peer_timeout_s",
        cmd->add_option("--peer-timeout", c.distributed.peer_timeout_s, "seconds a collective waits for a peer"))
      ->capture_default_str()->group(cluster_group);
  field("/distributed/rendezvous_timeout_s",
        cmd->add_option("--rendezvous-timeout", c.distributed.rendezvous_timeout_s, "seconds to wait for every task to join"))
      ->capture_default_str()->group(cluster_group);
  field("/distributed/heartbeat_timeout_s",
        cmd->add_option("--heartbeat-timeout", c.distributed.heartbeat_timeout_s,
                        "seconds without an answer from a parameter server's host before it is named dead "
                        "(a server process that exits is named at once)"))
      ->capture_default_str()->group(cluster_group);
  field("/distributed/restart_wait_s",
        cmd->add_option("--restart-wait", c.distributed.restart_wait_s,
                        "when the job loses a task: 0, exit 1; N, start this task again in place and wait up to N "
                        "seconds for the job's next start, every task continuing from the newest checkpoint (a "
                        "server restarted by hand rejoins this way)"))
      ->capture_default_str()->group(cluster_group);
  field("/distributed/verify_replicas_every",
        cmd->add_option("--verify-replicas-every", c.distributed.verify_replicas_every,
                  "compare parameter checksums across workers every N steps (0: never)"))
      ->capture_default_str()->group(cluster_group);
  const char* ps_group = "Parameter server";
  field("/distributed/ps_mode",
        cmd->add_option("--ps-mode", c.distributed.ps_mode, "sync (mean of every worker per step) or async"))
      ->capture_default_str()->group(ps_group);
  field("/distributed/staleness", cmd->add_option("--staleness", c.distributed.staleness,
                  "bounded staleness: a worker runs at most k steps ahead of the slowest (0 = sync)"))
      ->group(ps_group);
  field("/distributed/ps_chunk_mb",
        cmd->add_option("--ps-chunk-mb", c.distributed.ps_chunk_mb,
                        "parameter chunk size spread over the servers; 0: about 16 chunks a server, at least 32, "
                        "16 KiB-4 MiB each"))
      ->capture_default_str()->group(ps_group);
  field("/distributed/hierarchical",
        cmd->add_option("--hierarchical", c.distributed.hierarchical,
                        "across hosts (all-reduce and sync PS): auto sums each host's workers' gradients over "
                        "loopback first, so each host's link carries them once (BytePS-style); off: every worker "
                        "sends its own"))
      ->capture_default_str()->group(ps_group);
  field("/distributed/priority",
        cmd->add_option("--priority", c.distributed.priority,
                        "PS: on sends queued pushes first layers first (two chunks in flight per server) and starts "
                        "the next forward as its first layers' parameters arrive; off sends in backward's order"))
      ->capture_default_str()->group(ps_group);
  field("/distributed/shared_memory",
        cmd->add_option("--ps-shared-memory", c.distributed.shared_memory,
                        "PS: on lets servers on a worker's host read its pushes from, and write its pulls into, the "
                        "worker's shared memory, skipping the socket's copies; off sends every byte through the socket")
            ->check(CLI::IsMember({"on", "off"})))
      ->capture_default_str()->group(ps_group);
  field("/distributed/ps_threads",
        cmd->add_option("--ps-threads", c.distributed.ps_threads, "optimizer apply threads per server (0: all cores)"))
      ->capture_default_str()->group(ps_group);
  const char* wire_group = "Wire format";
  field("/distributed/wire_dtype",
        cmd->add_option("--wire-dtype", c.distributed.wire_dtype,
                        "how gradient buckets and PS chunks travel: fp32, fp16 or bf16 (half the bytes; master "
                        "weights and optimizer state stay float32)"))
      ->capture_default_str()->group(wire_group);
  field("/distributed/error_feedback",
        cmd->add_flag("--error-feedback", c.distributed.error_feedback,
                      "with --wire-dtype fp16|bf16: carry each gradient's rounding into its next push or all-reduce"))
      ->group(wire_group);
  field("/emulate_compute",
        cmd->add_option("--emulate-compute", c.emulate_compute,
                        "a GPU profile (JSON, profiles/): forward and backward become timed waits shaped like the "
                        "model's FLOPs, everything else stays real"))
      ->group("Scale-out lab");
  field("/timeline", cmd->add_flag("--timeline", c.timeline,
                                   "write OUT/timeline-worker-N.json (Chrome trace, Perfetto): each step's phases, "
                                   "bucket all-reduces, emulated layers; launch merges them into OUT/timeline.json"))
      ->group("Scale-out lab");
  field("/debug_step_delay_ms", cmd->add_option("--debug-step-delay-ms", c.debug_step_delay_ms,
                  "sleep this long every step: a deliberate straggler for testing"))
      ->group("Debugging");
  auto secret_file = std::make_shared<std::string>();
  auto insecure = std::make_shared<bool>(false);
  const char* security_group = "Security";
  cmd->add_option("--secret-file", *secret_file,
                  "the job secret (tandem secret new FILE): only tasks holding it can reach this job's servers; "
                  "default: $TANDEM_SECRET_FILE, else ~/.config/tandem/job-secret")
      ->group(security_group);
  cmd->add_flag("--insecure", *insecure,
                "let anyone who reaches the job's ports in, unauthenticated and unencrypted")
      ->group(security_group);
  auto progress = std::make_shared<std::string>("auto");
  cmd->add_option("--progress", *progress, "auto, live, plain, or records (JSON lines for a launcher)")
      ->check(CLI::IsMember({"auto", "live", "plain", "records"}))
      ->capture_default_str();

  return {cmd, [cmd, config, synthetic_shape, progress, cluster_flags, fields, secret_file, insecure] {
    config->dataset.synthetic_shape = parseShape(*synthetic_shape);
    config->progress = *progress == "records" ? obs::ProgressStyle::kRecords
                       : *progress == "live" || (*progress == "auto" && obs::Progress::stderrIsTerminal())
                           ? obs::ProgressStyle::kLive
                           : obs::ProgressStyle::kPlain;
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
    // Where this process sits, its start (a restart in place says which)
    // and, in a cluster, its security: worked out once here, passed down.
    const cluster::ProcessSetup process =
        cluster::setUpProcess(*cluster_flags, config->threads, cluster::captureEnvironment());
    const std::optional<cluster::ClusterSpec>& spec = process.spec;
    cluster::JobContext context;
    if (spec) context.setSecurity(net::resolveJobSecurity(*secret_file, *insecure));
    rejectIgnoredFlags(*cmd, spec, *config);
    const auto given = [&cmd](const char* flag, double value) {
      return cmd->count(flag) > 0 ? std::optional<double>(value) : std::nullopt;
    };
    train::applyOptimizerDefaults(config->optimizer, given("--momentum", config->optimizer.momentum),
                                  given("--weight-decay", config->optimizer.weight_decay));
    if (!config->resume_from.empty() && !(spec && spec->role == cluster::Role::kPs)) {
      applyResumeDefaults(*config, *fields);
    }
    if (const std::string& bind = config->distributed.bind; bind == "0.0.0.0" || bind == "::" || bind == "*") {
      TANDEM_LOG_WARN("--bind {}: this task's ports listen on every interface, reachable from any network this "
                      "machine is on",
                      bind);
    }
    config->threads = process.threads.threads;
    config->local_processes = process.threads.local_processes;
    config->local_rank = process.local.rank;
    if (spec && spec->role == cluster::Role::kPs) {
      // A stop signal reaches the workers too; the server keeps serving
      // until they have finished their last step.
      train::validate(*config);
      return runPsTask(*spec, *config, context.security());
    }
    nlohmann::json summary;
    try {
      train::Trainer trainer(*config, train::makeStrategy(spec, *config, context), context, &stopFlag());
      summary = trainer.run();
    } catch (const InputError&) {
      throw;
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      // The trainer is gone, and with it this task's ports and connections.
      if (mayRestartInPlace(spec ? &*spec : nullptr, *config, context.start())) {
        restartInPlace(*spec, *config, context.start(), e.what());
      }
      throw;
    }
    // fputs, not fmt::print: a closed stdout (`| head`) is no failure of the run.
    if (summary.at("rank").get<int>() == 0) std::fputs((summary.dump(2) + "\n").c_str(), stdout);
    return summary.at("interrupted").get<bool>() ? 130 : 0;
  }};
}

}  // namespace tandem::cli
