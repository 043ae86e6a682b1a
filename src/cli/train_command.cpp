#include <fmt/format.h>

#include <atomic>
#include <csignal>

#include "cli/commands.hpp"
#include "cluster/cluster_spec.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "obs/progress.hpp"
#include "train/config.hpp"
#include "cli/ps_task.hpp"
#include "train/allreduce_strategy.hpp"
#include "train/ps_strategy.hpp"
#include "train/trainer.hpp"

namespace tandem::cli {
namespace {

// Set by SIGINT/SIGTERM; the trainer checks it between steps, so a stopped
// run still leaves a checkpoint and summary behind. A second signal kills.
std::atomic<bool> g_stop_requested{false};

void onStopSignal(int signal) {
  if (g_stop_requested.exchange(true)) {
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

// Standalone without a cluster spec (flags, TF_CONFIG or a launcher's
// environment); parameter server when the spec has PS tasks; all-reduce
// otherwise.
std::unique_ptr<train::Strategy> makeStrategy(const std::optional<cluster::ClusterSpec>& spec,
                                              const train::TrainConfig& config) {
  if (!spec) return std::make_unique<train::StandaloneStrategy>();
  if (spec->numServers() > 0) return std::make_unique<train::PsStrategy>(*spec, config);
  return std::make_unique<train::AllReduceStrategy>(*spec, config.distributed);
}

}  // namespace

Command addTrainCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a model: standalone, or as one task of a cluster (cluster flags, TF_CONFIG, mpirun, srun or "
               "torchrun environment)");
  auto config = std::make_shared<train::TrainConfig>();
  auto synthetic_shape = std::make_shared<std::string>("3x32x32");
  auto& c = *config;
  cmd->add_option("--model", c.model, "model name (see `tandem models`)")->capture_default_str();
  cmd->add_option("--mlp-widths", c.model_options.mlp_widths, "hidden widths of the mlp model")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--dataset", c.dataset.name, "fashion-mnist, mnist-idx, cifar10 or synthetic")->capture_default_str();
  cmd->add_option("--data-dir", c.dataset.data_dir, "dataset directory (default: the dataset's standard location)");
  cmd->add_flag("--augment", c.dataset.augment, "pad-4 random crop and horizontal flip on training images");
  cmd->add_option("--synthetic-shape", *synthetic_shape, "synthetic sample shape CxHxW")->capture_default_str();
  cmd->add_option("--synthetic-classes", c.dataset.synthetic_classes, "synthetic class count")->capture_default_str();
  cmd->add_option("--synthetic-size", c.dataset.synthetic_train_size, "synthetic training samples")->capture_default_str();
  cmd->add_option("--batch-size", c.batch_size, "samples per micro-batch per worker")->capture_default_str();
  cmd->add_option("--accumulate", c.accumulate, "micro-batches per update; gradients sync on the last")
      ->capture_default_str();
  auto* epochs = cmd->add_option("--epochs", c.epochs, "passes over the training set")->capture_default_str();
  cmd->add_option("--max-steps", c.max_steps, "stop after this many global steps (overrides --epochs)")
      ->excludes(epochs);
  cmd->add_option("--seed", c.seed, "seed for initialisation, shuffling and augmentation")->capture_default_str();
  cmd->add_option("--threads", c.threads, "torch intra-op threads (0: all cores)")->capture_default_str();
  cmd->add_option("--prefetch-threads", c.prefetch_threads, "input pipeline threads (0: build batches inline)")
      ->capture_default_str();
  cmd->add_option("--prefetch-depth", c.prefetch_depth, "batches the input pipeline may run ahead")->capture_default_str();
  cmd->add_option("--optimizer", c.optimizer.name, "sgd or adam")->capture_default_str();
  cmd->add_option("--lr", c.optimizer.lr, "base learning rate")->capture_default_str();
  cmd->add_option("--momentum", c.optimizer.momentum, "SGD momentum")->capture_default_str();
  cmd->add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum (SGD)");
  cmd->add_option("--weight-decay", c.optimizer.weight_decay, "L2 weight decay")->capture_default_str();
  cmd->add_option("--adam-beta1", c.optimizer.beta1, "Adam beta1")->capture_default_str();
  cmd->add_option("--adam-beta2", c.optimizer.beta2, "Adam beta2")->capture_default_str();
  cmd->add_option("--adam-eps", c.optimizer.eps, "Adam epsilon")->capture_default_str();
  cmd->add_option("--lr-schedule", c.lr.kind, "constant, piecewise or cosine")->capture_default_str();
  cmd->add_option("--lr-boundaries", c.lr.boundaries, "piecewise boundaries (comma-separated)")->delimiter(',');
  cmd->add_option("--lr-values", c.lr.values, "piecewise rates, one more than boundaries")->delimiter(',');
  cmd->add_option("--lr-boundary-unit", c.lr.unit, "piecewise boundaries in 'step' or 'epoch'")->capture_default_str();
  cmd->add_option("--min-lr", c.lr.min_lr, "cosine floor")->capture_default_str();
  cmd->add_option("--warmup-steps", c.lr.warmup_steps, "linear warmup steps before the schedule")->capture_default_str();
  cmd->add_option("--lr-scaling", c.lr.scaling,
                  "none, or linear: rates x (workers x accumulate), warming up from the unscaled rate")
      ->capture_default_str();
  cmd->add_option("--eval-every", c.eval_every_steps, "evaluate every N steps (0: at each epoch end)")
      ->capture_default_str();
  cmd->add_option("--eval-batch-size", c.eval_batch_size, "evaluation batch size")->capture_default_str();
  cmd->add_option("--log-every", c.log_every_steps, "write a metrics line every N steps")->capture_default_str();
  cmd->add_option("--checkpoint-every", c.checkpoint_every_steps,
                  "also checkpoint every N steps to OUT/checkpoints/ (the final one is always OUT/checkpoint.ckpt)")
      ->capture_default_str();
  cmd->add_option("--resume", c.resume_from, "continue the exact trajectory from this checkpoint");
  cmd->add_option("--out", c.out_dir, "run directory for metrics.jsonl, summary.json, checkpoints")
      ->capture_default_str();
  auto cluster_flags = std::make_shared<cluster::ClusterFlags>();
  auto& f = *cluster_flags;
  const char* cluster_group = "Cluster";
  cmd->add_option("--worker_hosts", f.worker_hosts, "comma-separated host:port of every worker; worker 0 coordinates")
      ->group(cluster_group);
  cmd->add_option("--ps_hosts", f.ps_hosts, "comma-separated host:port of every parameter server")->group(cluster_group);
  cmd->add_option("--job_name", f.job_name, "this task's job: worker or ps")->group(cluster_group);
  cmd->add_option("--task_index,--task_id", f.task_index, "this task's index within its job")->group(cluster_group);
  cmd->add_option("--coordinator", f.coordinator, "host:port of worker 0's store (needed under mpirun and srun)")
      ->group(cluster_group);
  cmd->add_option("--bucket-mb", c.distributed.bucket_mb, "gradient bucket size cap in MB")
      ->capture_default_str()->group(cluster_group);
  cmd->add_option("--peer-timeout", c.distributed.peer_timeout_s, "seconds a collective waits for a peer")
      ->capture_default_str()->group(cluster_group);
  cmd->add_option("--rendezvous-timeout", c.distributed.rendezvous_timeout_s, "seconds to wait for every task to join")
      ->capture_default_str()->group(cluster_group);
  cmd->add_option("--verify-replicas-every", c.distributed.verify_replicas_every,
                  "compare parameter checksums across workers every N steps (0: never)")
      ->capture_default_str()->group(cluster_group);
  const char* ps_group = "Parameter server";
  cmd->add_option("--ps-mode", c.distributed.ps_mode, "sync (mean of every worker per step) or async")
      ->capture_default_str()->group(ps_group);
  cmd->add_option("--staleness", c.distributed.staleness,
                  "bounded staleness: a worker runs at most k steps ahead of the slowest (0 = sync)")
      ->group(ps_group);
  cmd->add_option("--ps-chunk-mb", c.distributed.ps_chunk_mb, "parameter chunk size spread over the servers")
      ->capture_default_str()->group(ps_group);
  cmd->add_option("--ps-threads", c.distributed.ps_threads, "optimizer apply threads per server (0: all cores)")
      ->capture_default_str()->group(ps_group);
  cmd->add_option("--debug-step-delay-ms", c.debug_step_delay_ms,
                  "sleep this long every step: a deliberate straggler for testing")
      ->group("Debugging");
  auto progress = std::make_shared<std::string>("auto");
  cmd->add_option("--progress", *progress, "auto, live or plain")->check(CLI::IsMember({"auto", "live", "plain"}))
      ->capture_default_str();

  return {cmd, [config, synthetic_shape, progress, cluster_flags] {
    config->dataset.synthetic_shape = parseShape(*synthetic_shape);
    config->progress_interactive =
        *progress == "live" || (*progress == "auto" && obs::Progress::stderrIsTerminal());
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
    const auto spec = cluster::resolveClusterSpec(*cluster_flags, cluster::captureEnvironment());
    if (spec && spec->role == cluster::Role::kPs) {
      // A stop signal reaches the workers too; the server keeps serving
      // until they have finished their last step.
      train::validate(*config);
      return runPsTask(*spec, *config);
    }
    train::Trainer trainer(*config, makeStrategy(spec, *config), &g_stop_requested);
    auto summary = trainer.run();
    if (summary.at("rank").get<int>() == 0) fmt::print("{}\n", summary.dump(2));
    return summary.at("interrupted").get<bool>() ? 130 : 0;
  }};
}

}  // namespace tandem::cli
