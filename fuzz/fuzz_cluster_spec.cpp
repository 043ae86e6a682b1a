// A cluster spec from what a user or launcher hands every task: TF_CONFIG,
// the classic flags, and the launchers' variables. Whatever they say, the
// result is a spec or an InputError naming the field, never a crash or
// another exception.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "core/error.hpp"

namespace {

// The input's lines, '\n'-separated.
std::vector<std::string> lines(const uint8_t* data, size_t size) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      out.emplace_back();
    } else {
      out.back().push_back(static_cast<char>(data[i]));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  if (size == 0) return 0;
  const auto given = lines(data + 1, size - 1);
  auto line = [&](size_t i) { return i < given.size() ? given[i] : std::string(); };
  cluster::ClusterFlags flags;
  Environment env;
  switch (data[0] % 4) {
    case 0: env["TF_CONFIG"] = std::string(reinterpret_cast<const char*>(data + 1), size - 1); break;
    case 1:
      flags.ps_hosts = line(0);
      flags.worker_hosts = line(1);
      flags.job_name = line(2);
      flags.task_index = static_cast<int>(cluster::parseInteger(line(3)).value_or(-1) % 100000);
      flags.coordinator = line(4);
      break;
    case 2:
      env["RANK"] = line(0);
      env["WORLD_SIZE"] = line(1);
      env["MASTER_ADDR"] = line(2);
      env["MASTER_PORT"] = line(3);
      env["TORCHELASTIC_USE_AGENT_STORE"] = line(4);
      break;
    default:
      env["OMPI_COMM_WORLD_RANK"] = line(0);
      env["OMPI_COMM_WORLD_SIZE"] = line(1);
      flags.coordinator = line(2);
      break;
  }
  try {
    (void)cluster::resolveClusterSpec(flags, env);
  } catch (const InputError&) {
  }
  return 0;
}
