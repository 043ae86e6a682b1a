#pragma once
// What a Slurm step tells its tasks, read without any Slurm library:
// its node list in Slurm's compressed form, and the coordinator that every
// task of the step finds from it alone. Torch-free.
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster_spec.hpp"

namespace tandem::cluster {

// Expands Slurm's compressed host list ("gpu[01-04,07],cpu3" is gpu01,
// gpu02, gpu03, gpu04, gpu07, cpu3), in order. A bracket holds numbers
// and ranges; a range keeps its lower bound's zero padding; several
// brackets in one name expand as nested loops, the last fastest, as
// Slurm's do ("r[1-2]n[1-2]": r1n1, r1n2, r2n1, r2n2). Throws InputError
// naming `field` and the list when it does not parse, or expands past
// kMaxSlurmHosts names.
inline constexpr size_t kMaxSlurmHosts = 1 << 20;
std::vector<std::string> expandHostlist(std::string_view list, std::string_view field);

// The port the tasks of a step agree on without talking:
// kSlurmPortBase + (job id mod 2000) * 10 + (step id mod 10), so from
// 12000 to 31999, under Linux's ephemeral ports (32768 on), and two steps
// of one job running side by side (ids 0 and 1) differ. `--coordinator`
// or MASTER_PORT overrides it.
inline constexpr int kSlurmPortBase = 12000;
int slurmPort(long long job_id, long long step_id);

// The coordinator of an srun step from its variables: the first host of
// SLURM_STEP_NODELIST (SLURM_JOB_NODELIST outside a step, or
// SLURM_NODELIST), where task 0 runs, and slurmPort of SLURM_JOB_ID and
// SLURM_STEP_ID (0 without one). Throws InputError naming the variable
// that is missing or bad.
HostPort slurmCoordinator(const Environment& env);

}  // namespace tandem::cluster
