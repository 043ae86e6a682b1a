#include "cli/launch_tasks.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "launch/process_group.hpp"

namespace tandem::cli {

std::string resolveProgram(const std::string& name, const Environment& env) {
  const std::string found = launch::findExecutable(name, env);
  if (!found.empty()) return found;
  if (name.find('/') != std::string::npos) {
    throw InputError(fmt::format("launch: program '{}' is not an executable file", name));
  }
  throw InputError(fmt::format("launch: program '{}' not found in PATH", name));
}

EnvironmentPairs programEnvironment(const std::vector<std::string>& workers, const std::vector<std::string>& servers,
                                    int index, const std::string& host, int master_port, int threads,
                                    const Environment& env) {
  nlohmann::json cluster = {{"worker", workers}};
  if (!servers.empty()) cluster["ps"] = servers;
  const nlohmann::json tf_config = {{"cluster", cluster}, {"task", {{"type", "worker"}, {"index", index}}}};
  const std::string world = std::to_string(workers.size());
  EnvironmentPairs vars{{"TF_CONFIG", tf_config.dump()},  {"RANK", std::to_string(index)}, {"WORLD_SIZE", world},
                        {"LOCAL_RANK", std::to_string(index)}, {"LOCAL_WORLD_SIZE", world}, {"MASTER_ADDR", host},
                        {"MASTER_PORT", std::to_string(master_port)}};
  // torchrun's habit too: each local worker gets its share of the cores.
  if (!env.contains("OMP_NUM_THREADS")) vars.emplace_back("OMP_NUM_THREADS", std::to_string(threads));
  return vars;
}

EnvironmentPairs placedTaskEnvironment(const launch::TaskHosts& hosts, bool server, int index) {
  const int workers = static_cast<int>(hosts.workers.size());
  const auto [local_rank, local_size] = hosts.localRank(server, index);
  const std::string& host = (server ? hosts.servers : hosts.workers).at(static_cast<size_t>(index));
  return {{"RANK", std::to_string(server ? workers + index : index)},
          {"WORLD_SIZE", std::to_string(workers + static_cast<int>(hosts.servers.size()))},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(local_size)},
          {"TANDEM_HOST", host}};
}

}  // namespace tandem::cli
