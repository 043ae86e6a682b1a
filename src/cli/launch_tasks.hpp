#pragma once
// What each task of `tandem launch` is told: a program's executable and
// environment on one host (TF_CONFIG with every address, torchrun's
// names), and, for a job over several hosts (--hosts), each task's place
// among them as torchrun's names and the host it runs on.
#include <string>
#include <utility>
#include <vector>

#include "core/environment.hpp"
#include "launch/host_list.hpp"

namespace tandem::cli {

using EnvironmentPairs = std::vector<std::pair<std::string, std::string>>;

// The executable a program name means, as a shell would find it. Throws
// InputError naming it when there is none.
std::string resolveProgram(const std::string& name, const Environment& env);

// A one-host program's worker: TF_CONFIG (which tandem::init() reads, with
// the servers) and torchrun's names, for code written against those.
EnvironmentPairs programEnvironment(const std::vector<std::string>& workers, const std::vector<std::string>& servers,
                                    int index, const std::string& host, int master_port, int threads,
                                    const Environment& env);

// A task of a job over several hosts, where no address is known ahead:
// RANK and WORLD_SIZE count every task, the last `servers` serve (`tandem
// train --ps K`, TANDEM_PS_TASKS for a program); LOCAL_RANK and
// LOCAL_WORLD_SIZE count those on its host; TANDEM_HOST is the host as
// listed, where it listens and the others reach it.
EnvironmentPairs placedTaskEnvironment(const launch::TaskHosts& hosts, bool server, int index);

}  // namespace tandem::cli
