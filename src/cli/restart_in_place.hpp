#pragma once
// train --restart-wait: a worker whose job failed after it started (a server
// or another worker died) starts itself again in place, same pid and
// command line, continuing from the newest checkpoint in --out, and waits
// for the job's next start (cluster/job_start.hpp). Without a launcher this
// is how a job comes back from a server restarted by hand.
#include <string>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "cluster/job_start.hpp"
#include "train/config.hpp"

namespace tandem::cli {

// The command line as main() received it, for starting again.
void rememberCommandLine(int argc, char** argv);

// Whether this task restarts on a failure now: a worker of a distributed
// job run with --restart-wait > 0, past its startup (`start`), and not
// asked to stop.
bool mayRestartInPlace(const cluster::ClusterSpec* spec, const train::TrainConfig& config,
                       const cluster::JobStart& start);

// Says what failed and where the job continues (the chief also appends it
// to OUT/restarts.jsonl), then re-executes this process. Returns only if
// the re-execution failed, having said why. `start`: the one that failed.
void restartInPlace(const cluster::ClusterSpec& spec, const train::TrainConfig& config,
                    const cluster::JobStart& start, const std::string& failure);

}  // namespace tandem::cli
