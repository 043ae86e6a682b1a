#pragma once
// Tandem's public C++ API: data-parallel training inside your own loop, in
// the vocabulary of Horovod and DDP.
//
//   tandem::init();                               // reads the cluster tandem launch (or torchrun, mpirun, Slurm) set
//   tandem::broadcast_parameters(*model, 0);      // every replica starts from rank 0's weights
//   tandem::DistributedOptimizer opt(sgd, *model);  // or {.mode = tandem::Mode::PsAsync}
//   for (...) { opt.zero_grad(); loss(model->forward(x), y).backward(); opt.step(); }
//
// Errors are exceptions derived from std::runtime_error whose message names
// the culprit (a missing rank, a bad variable, a shape that differs across
// ranks). Functions are not thread-safe: call them from one thread, as a
// training loop does.
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/collectives.hpp"
#include "tandem/host_aggregation.hpp"
#include "tandem/mode.hpp"
#include "tandem/option_defaults.hpp"
#include "tandem/wire_dtype.hpp"

namespace tandem {

// Fields that `tandem train` also takes (as --rendezvous-timeout, ...) get
// their defaults and checks from the same declaration (option_default).
struct InitOptions {
  // how long init() waits for every rank
  double rendezvous_timeout_s = option_default<double>("rendezvous_timeout_s");
  // how long a collective waits for a peer
  double peer_timeout_s = option_default<double>("peer_timeout_s");
  // DistributedOptimizer's gradient bucket cap in MiB; 0: sized from the
  // model, about 16 buckets of 0.25-4 MiB (as `tandem train` does).
  double bucket_mb = option_default<double>("bucket_mb");
  // How DistributedOptimizer's gradient buckets and PS chunks travel:
  // float32, or fp16 or bf16 (half the bytes; weights and optimizer state
  // stay float32). error_feedback carries each value's rounding into its
  // next send.
  WireDtype wire_dtype = option_default<WireDtype>("wire_dtype");
  bool error_feedback = option_default<bool>("error_feedback");
  // kAuto: when the job spans hosts and a host runs several workers, sums
  // go over each host's loopback first (`tandem train --hierarchical`);
  // kOff: every worker sends its own.
  HostAggregation hierarchical = option_default<HostAggregation>("hierarchical");
  // Who may reach the job's servers (docs/security.md): the secret in this
  // file (`tandem secret new FILE`); empty: $TANDEM_SECRET_FILE, else the
  // user's ~/.config/tandem/job-secret. insecure lets anyone in.
  std::string secret_file;
  bool insecure = false;
};

// Joins the job this process belongs to: the cluster is read from TF_CONFIG
// (set by `tandem launch`), or the environment of torchrun, mpirun or srun.
// With none of them the process trains alone (size() == 1). Every worker
// must call it; parameter servers are `tandem launch --ps K`'s own tasks. Throws on a malformed environment (naming the variable) or when a
// rank does not arrive within rendezvous_timeout_s (naming it).
void init(const InitOptions& options = {});
bool is_initialized();
// Leaves the job after a barrier; init() may be called again afterwards.
// Also run at exit for a process that never calls it.
void shutdown();

int rank();
int size();

// Horovod's elastic training (hvd.elastic), in a job started by `tandem
// launch --min-workers N` (TANDEM_MIN_WORKERS): when a worker dies, the
// others go on in-process, and a worker the launcher starts again joins.
bool elastic_enabled();
// Whether the membership is about to change (a worker died or waits to
// join), as every rank agrees: a collective, called at the same point by
// all (hvd.elastic's State.commit does).
bool elastic_hosts_updated();
// After a failed collective (PeerError) or an agreed change: leaves the
// broken communicator, agrees on the next members with the others and
// connects to them; rank() and size() change. Throws PeerError when the
// job cannot go on (fewer than N workers left), naming the dead.
void elastic_reset();
// The rank whose state the others take after the last reset (hvd.elastic's
// State.sync): the lowest-id worker at the newest commit. A worker that
// came back may be rank 0 now and holds no state yet. 0 when nothing changed.
int elastic_sync_root();

int local_rank();  // rank among this host's workers
int local_size();

// Copies every parameter and buffer of `module` from `root_rank` to all.
void broadcast_parameters(torch::nn::Module& module, int root_rank = 0);
// The same for any tensors (every rank passes the same shapes, in order).
void broadcast_parameters(const std::vector<torch::Tensor>& tensors, int root_rank = 0);

// The gradient averaging behind DistributedOptimizer, for loops that step
// their own way (or an optimizer that lives elsewhere, as in the Python
// package): hooks on `module`'s parameters average each gradient over all
// ranks, in buckets, while backward still runs.
struct AveragerOptions {
  int backward_passes_per_step = 1;
  // Average or Sum. Average divides by size() before the sum, or, with a
  // gradient_predivide_factor f other than 1, by f before the sum and by
  // size()/f after it (Horovod's).
  ReduceOp op = ReduceOp::Average;
  double gradient_predivide_factor = 1.0;
  std::optional<WireDtype> wire_dtype;  // unset: InitOptions::wire_dtype
  double bucket_mb = -1;                // negative: InitOptions::bucket_mb
  // Averages among a process set's members only; a rank outside it keeps
  // its own gradients (Horovod's).
  int process_set = 0;
};

class GradientAverager {
 public:
  // Every rank's module must have the same parameter names and shapes, in
  // the same order: a difference is an error naming the ranks.
  // `backward_passes_per_step` backward passes add up before each
  // synchronize(), as in Horovod (divide the loss for their mean).
  explicit GradientAverager(torch::nn::Module& module, int backward_passes_per_step = 1);
  GradientAverager(torch::nn::Module& module, const AveragerOptions& options);
  ~GradientAverager();
  GradientAverager(GradientAverager&&) noexcept = default;
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  // After backward: waits until every parameter's .grad is the mean over
  // all ranks (parameters without a gradient this step count as zero).
  void synchronize();
  // Unsets every gradient (a reduced gradient must not be added into) and
  // readies the hooks for the next backward. Throws InputError between a
  // backward pass and synchronize(), while its gradients are on the wire.
  void zero_grad();
  // Whether a backward pass ran since the last synchronize() or zero_grad().
  bool pending() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How DistributedOptimizer makes the replicas agree: Mode (tandem/mode.hpp),
// AllReduce or a parameter-server mode (Standalone is refused).

struct DistributedOptions {
  Mode mode = Mode::AllReduce;
  int staleness = 1;                 // Ssp only
  int backward_passes_per_step = 1;  // passes whose gradients add up before each step()
  // The rest as `tandem train` takes them (--ps-chunk-mb, ...): defaults
  // and checks from the same declaration.
  // PS modes: parameter chunk size in MiB; 0: from the model, about 16
  // chunks a server (as `tandem train` does).
  double ps_chunk_mb = option_default<double>("ps_chunk_mb");
  // PsSync and PsAsync: DiLoCo. > 0: the optimizer steps on each rank
  // alone, and every `local_steps` steps the servers apply the outer
  // optimizer (nesterov or sgd) to the ranks' mean change; finish() ends a
  // partial last round. 0: off.
  int64_t local_steps = option_default<int64_t>("local_steps");
  std::string outer_optimizer = option_default<std::string>("outer_optimizer");
  double outer_lr = option_default<double>("outer_lr");
  double outer_momentum = option_default<double>("outer_momentum");
  // PS modes: 8 or 4 sends each push (gradient, or DiLoCo's change) in that
  // many bits a value, with a scale per 128 values and error feedback;
  // pulls keep InitOptions::wire_dtype. 0: pushes in the wire dtype.
  int push_bits = option_default<int>("push_bits");
  // PsAsync and Ssp: DC-ASGD's lambda0 on the servers (0: off), which
  // correct each push towards the values they now hold.
  double delay_compensation = option_default<double>("delay_compensation");
};

// Wraps the user's optimizer. AllReduce: gradients are averaged over all
// ranks in buckets while backward still runs, then the optimizer steps on
// every rank with the same mean gradient. PS modes: each chunk of gradients
// is pushed to its server while backward still runs; the servers run the
// optimizer (SGD, Adam, AdamW or RMSprop with this optimizer's settings, at
// the learning rate it holds at each zero_grad() and step()), and step()
// installs the parameters pulled back. The chief's parameters initialise
// the servers. With one rank and no servers it is the optimizer itself.
class DistributedOptimizer {
 public:
  // `optimizer` must optimise `module`'s parameters; both must outlive this.
  // Every rank's module must have the same parameter shapes, in the same
  // order: a difference is an error naming the ranks and the parameter.
  DistributedOptimizer(torch::optim::Optimizer& optimizer, torch::nn::Module& module,
                       const DistributedOptions& options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Unsets every gradient (a reduced gradient must not be added into).
  void zero_grad();
  // After backward_passes_per_step backward passes: waits for the agreed
  // update, applies it, then unsets the gradients. Throws InputError on a
  // different number of passes.
  void step();
  // PS modes, at the end of training: the chief waits for the other
  // workers' last updates (async, SSP) and pulls the final parameters; then
  // the servers are told this worker is done. The destructor does it too.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
