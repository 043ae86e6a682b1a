#pragma once
// Parameter-server data parallelism. Parameters live on the PS tasks, cut
// into chunks (ps::KeyLayout) spread evenly over them; the servers run the
// optimizer. A worker pushes each chunk's gradient the moment backward has
// produced every gradient in it, reports the step to ps 0 (which holds the
// step clocks: sync barrier, bounded staleness, agreed loss and stop), and
// pulls the chunks back in forward order, copying each into the model as it
// arrives. The worker runs no optimizer of its own.
#include <memory>

#include "cluster/cluster_spec.hpp"
#include "cluster/job_context.hpp"
#include "train/config.hpp"
#include "train/strategy.hpp"

namespace tandem::train {

class PsStrategy final : public Strategy, public RemoteParameters, public GatedParameters {
 public:
  // Nothing touches the network until initialize(). Uses the config's
  // optimizer, schedule and distributed settings; DiLoCo (--local-steps)
  // is DilocoStrategy's, on the same parts. `joined`: the process is
  // already a member of the job (the APIs' init()), so initialize() skips
  // the rendezvous; the servers still check every worker's layout.
  // `context` (the job's start and security) must outlive the strategy.
  PsStrategy(cluster::ClusterSpec spec, TrainConfig config, cluster::JobContext& context, bool joined = false);
  ~PsStrategy() override;

  Mode mode() const override;
  int rank() const override;
  int worldSize() const override;
  int serverCount() const override;
  // Joins the workers, then the chief initialises every server (config,
  // learning-rate table, initial parameters) and everyone pulls the initial
  // parameters. When resuming, the chief sends the checkpoint's optimizer
  // state along. Throws PeerError naming a server that never answers.
  void initialize(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan) override;
  RemoteParameters* remoteParameters() override { return this; }
  GatedParameters* gatedParameters() override { return this; }
  std::optional<Takeover> takeover() const override;
  // Async and SSP: asks ps 0 to answer once every other worker is done or
  // lost, then pulls the final parameters. Sync: every worker already ended
  // on the same step.
  int64_t awaitJobEnd(int64_t own_step) override;
  void beforeBackward(const LocalStep& so_far, int micro_step) override;
  AgreedStep synchronizeGradients(torch::nn::Module& model, const LocalStep& local) override;
  // Tells every server this worker is done.
  void finish() override;
  // The rate this worker's next pushes apply with (sync: worker 0's rules),
  // replacing the schedule; sent only when it changed.
  void setLearningRate(double lr) override;
  // Fetches every chunk's optimizer slots into torch's state for `optimizer`,
  // so the checkpoint resumes in any mode.
  std::optional<int64_t> prepareCheckpoint(torch::optim::Optimizer& optimizer) override;

  // --priority on: pulls land (and host-mates share them) while the next forward runs.
  void allowGatedParameters() override;
  void awaitParameters(size_t count = SIZE_MAX) override;
  SyncTimes takeParameterWaits() override;

  // Includes max_lead_steps: the furthest this worker ran ahead of the
  // slowest one, as ps 0 reported at each step start (SSP keeps it <= k).
  nlohmann::json summary() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::train
