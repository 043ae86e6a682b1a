#pragma once
// The strategy a worker trains with, from its cluster: shared by `tandem
// train` and the C++ API's tandem::fit.
#include <memory>
#include <optional>

#include "cluster/cluster_spec.hpp"
#include "cluster/job_context.hpp"
#include "train/config.hpp"
#include "train/strategy.hpp"

namespace tandem::train {

// Standalone without a cluster spec (flags, TF_CONFIG or a launcher's
// environment); parameter server when the spec has PS tasks (DiLoCo with
// --local-steps); all-reduce otherwise. `context` must outlive the
// strategy. `joined`: a parameter-server worker is a member of the job
// already (the APIs' init()), so its initialize() skips the rendezvous.
std::unique_ptr<Strategy> makeStrategy(const std::optional<cluster::ClusterSpec>& spec, const TrainConfig& config,
                                       cluster::JobContext& context, bool joined = false);

}  // namespace tandem::train
