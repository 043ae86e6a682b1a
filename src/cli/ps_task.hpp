#pragma once
// A PS task of `tandem train`: serves its share of the parameters until the
// workers are done. Touches no torch code.
#include "cluster/cluster_spec.hpp"
#include "net/job_security.hpp"
#include "train/config.hpp"

namespace tandem::cli {

// Returns the exit code: 0 when every worker finished, 1 when a sync or
// bounded run lost a worker (an async run carries on without it).
// `security`: the job's, which its workers must hold.
int runPsTask(const cluster::ClusterSpec& spec, const train::TrainConfig& config, const net::JobSecurity& security);

}  // namespace tandem::cli
