#pragma once
// DiLoCo (Douillard et al. 2023) on the parameter servers. Each worker
// trains --local-steps H steps with its own (inner) optimizer, on its own
// data shard, without communicating. Then every worker pushes its outer
// gradient, the change since the last global model (global - local), the
// sync servers average the workers' and apply the outer optimizer
// (Nesterov momentum by default), and every worker pulls the new global
// model and trains on from it. The run's last step always ends a round, so
// the run ends on a global model. Async (--ps-mode async): each worker's
// outer gradient is applied as it arrives, scaled by its share (1/workers),
// and the worker goes on with whatever the servers then hold.
//
// The exchange is a parameter-server step whose gradients are the outer
// gradients, on the PS client's parts (PsConnection, PsPushPipeline,
// PsPullLanding): chunks, 16-bit wires, hierarchical sums, GPU staging and
// the step clock are the same code. Replicas agree only after a round, so
// evaluations and checkpoints wait for one. A checkpoint holds the global
// model, the outer optimizer (fetched from the servers) and the chief's
// inner optimizer; every other worker keeps its inner optimizer in
// workers/worker-N/inner-state/step-S.pt beside it, so a resume is exact.
//
// Streaming (--fragments F, --fragment-delay, --fragment-mix): the model's
// chunks are exchanged one fragment at a time, on FragmentSchedule's
// timetable, by a FragmentExchange; the replicas agree only at the end. A
// checkpoint is taken right after a merge, with no exchange in flight: it
// holds the servers' global model, and every worker keeps its own model in
// workers/worker-N/local-model/step-S.pt beside its inner state.
#include <memory>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "cluster/job_context.hpp"
#include "core/clock.hpp"
#include "train/config.hpp"
#include "train/fragment_exchange.hpp"
#include "train/ps_pull_landing.hpp"
#include "train/ps_push_pipeline.hpp"
#include "train/ps_setup.hpp"
#include "train/strategy.hpp"

namespace tandem::train {

// The outer optimizer as the servers run it: SGD with --outer-momentum
// (Nesterov unless --outer-optimizer sgd), at --outer-lr, no decay, no
// schedule, one update per round.
OptimizerConfig outerOptimizerOf(const DistributedConfig& d);

// Rounds of --local-steps `h` that `steps` steps make; a last, partial one
// counts.
int64_t roundsOf(int64_t steps, int64_t h);

class DilocoStrategy final : public Strategy, public RemoteParameters {
 public:
  // `joined`: the process is a member of the job already (the APIs'
  // init()), so initialize() skips the rendezvous. `context` must outlive
  // the strategy.
  DilocoStrategy(cluster::ClusterSpec spec, TrainConfig config, cluster::JobContext& context, bool joined = false);
  ~DilocoStrategy() override;

  Mode mode() const override { return mode_; }
  int rank() const override { return spec_.index; }
  int worldSize() const override { return spec_.num_workers; }
  int serverCount() const override { return spec_.numServers(); }
  // Joins as a PS worker over rounds instead of steps. Resuming: the
  // servers get the checkpoint's outer state, and a worker other than the
  // chief loads its own inner optimizer state into plan.optimizer.
  void initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) override;
  // Local only: the mean of the micro-batches.
  AgreedStep synchronizeGradients(torch::nn::Module& model, const LocalStep& local) override;
  // At a round's end: pushes the outer gradients, waits for the servers'
  // update and pulls the global model; the loss and stop are then agreed.
  SyncTimes afterUpdate(torch::nn::Module& model, AgreedStep& agreed) override;
  // Open-ended runs (the APIs): ends a partial last round, if any, so that
  // every worker holds the global model. Sync: every worker must call it
  // after the same steps.
  void settleOpenRun(torch::nn::Module& model) override;
  // Workers step their own optimizer on their own batches; sync: every
  // worker keeps its inner state at the chief's checkpoints.
  StepPolicy policy() const override {
    return {.worker_applies_updates = true,
            .averages_worker_batches = false,
            .shares_job_steps = false,
            .checkpoints_by_agreement = mode() == Mode::PsSync};
  }
  // Tells every server this worker is done.
  void finish() override;
  RemoteParameters* remoteParameters() override { return this; }
  nlohmann::json summary() const override;

  // Pulls land during afterUpdate, never behind a forward (no gated
  // parameters), and every worker starts with the job.
  std::optional<Takeover> takeover() const override { return std::nullopt; }
  // Async: waits until every other worker's last round is in, and pulls
  // the final global model.
  int64_t awaitJobEnd(int64_t own_step) override;
  // Fetches the servers' outer state into outerOptimizer(); the inner
  // optimizer is the caller's already. Async: each chunk as it is then,
  // without pausing the others (their next round may be many steps away).
  std::optional<int64_t> prepareCheckpoint(torch::optim::Optimizer& optimizer) override;
  torch::optim::Optimizer* outerOptimizer() override { return outer_.get(); }
  // Streaming, mid-run: this worker's own model comes back.
  void checkpointSaved() override;

 private:
  // workers/worker-N/`kind`/step-S.pt: "inner-state" or "local-model".
  std::filesystem::path workerStatePath(const char* kind, int64_t step) const;
  // What a checkpoint at `step` needs of this worker beside the chief's file.
  void saveWorkerState(int64_t step) const;
  void keepGlobal();  // the model's parameters are the global model now
  // Pushes the outer gradients, waits for the servers' update and pulls.
  SyncTimes exchange(torch::nn::Module& model, AgreedStep& agreed);
  // Streaming: starts, merges or ends fragments' exchanges after a step.
  SyncTimes exchangeFragments(AgreedStep& agreed);
  // Servers give up on a worker silent for --peer-timeout; a round may be longer.
  void keepAliveIfQuiet();

  TrainConfig config_;
  cluster::ClusterSpec spec_;
  cluster::JobContext& context_;
  bool joined_ = false;
  Mode mode_ = Mode::PsSync;
  // The parts, in this order: the pushes and pulls go before the connection.
  PsConnection link_;
  std::unique_ptr<PsPushPipeline> pushes_;  // unstreamed: the outer gradients
  std::unique_ptr<PsPullLanding> pulls_;    // unstreamed: the global model
  std::unique_ptr<FragmentExchange> fragments_;  // streaming only
  std::vector<torch::Tensor> params_;  // trainable, registration order
  std::vector<torch::Tensor> global_;  // the global model as last pulled
  std::unique_ptr<torch::optim::Optimizer> outer_;  // a holder for the servers' outer state
  torch::optim::Optimizer* inner_ = nullptr;        // the run's optimizer
  int64_t step_ = 0;
  int64_t total_steps_ = 0;
  int64_t rounds_ = 0;  // this run's
  int64_t clock_ = 0;   // ps 0's: the exchanges this worker has reported
  int64_t max_lead_ = 0;  // the furthest this worker ran ahead of the slowest one, in rounds
  Clock::time_point round_start_ = Clock::now();
  Clock::time_point last_contact_ = Clock::now();  // with the servers
  bool stop_wanted_ = false;
  bool checkpoint_wanted_ = false;
  bool on_global_ = false;                // streaming: the last step exchanged every fragment
  std::vector<torch::Tensor> own_model_;  // streaming: this worker's, while a checkpoint holds the global one
};

}  // namespace tandem::train
