#include "cluster/device_placement.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "cluster/local_address.hpp"
#include "cluster/local_share.hpp"
#include "core/error.hpp"

namespace tandem::cluster {
namespace {

int nonNegative(const std::string& text, const char* name) {
  const auto value = parseInteger(text);
  if (!value || *value < 0 || *value > 1'000'000) {
    throw InputError(fmt::format("{}={}: expected a local rank (an integer >= 0)", name, text));
  }
  return static_cast<int>(*value);
}

}  // namespace

DeviceRequest parseDeviceRequest(std::string_view text) {
  DeviceRequest request;
  request.text = std::string(text);
  if (text == "auto") return request;
  if (text == "cpu") {
    request.kind = DeviceRequest::Kind::kCpu;
    return request;
  }
  if (text == "cuda" || text.starts_with("cuda:")) {
    request.kind = DeviceRequest::Kind::kCuda;
    if (text.size() > 4) {
      const auto index = parseInteger(text.substr(5));
      if (!index || *index < 0 || *index > 1'000'000) {
        throw InputError(fmt::format("--device {}: expected cuda:N with N a GPU index >= 0", text));
      }
      request.index = static_cast<int>(*index);
    }
    return request;
  }
  throw InputError(fmt::format("--device {}: expected auto, cpu, cuda or cuda:N", text));
}

LocalRank findLocalRank(const std::optional<ClusterSpec>& spec, const Environment& env) {
  const LocalProcesses local = countLocalProcesses(spec, env);
  LocalRank result{0, std::max(1, local.count), local.source};
  if (spec && !spec->worker_hosts.empty()) {
    if (spec->role != Role::kWorker) return result;
    const auto own = static_cast<size_t>(spec->index);
    const std::string host = ownWorkerHost(*spec);
    for (size_t i = 0; i < std::min(own, spec->worker_hosts.size()); ++i) {
      result.rank += spec->worker_hosts[i].host == host ? 1 : 0;
    }
    return result;
  }
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (auto it = env.find(name); it != env.end()) {
      result.rank = nonNegative(it->second, name);
      result.source = name;
      if (result.rank >= result.count) {
        throw InputError(fmt::format("{}={}: not below the {} local processes that {} counts", name, it->second,
                                     result.count, local.source));
      }
      return result;
    }
  }
  return result;
}

std::string DevicePlacement::text() const { return cuda ? fmt::format("cuda:{}", index) : "cpu"; }

DevicePlacement placeDevice(const DeviceRequest& request, int visible_gpus, const LocalRank& local,
                            std::string_view no_gpu_detail, bool allow_shared) {
  using Kind = DeviceRequest::Kind;
  if (request.kind == Kind::kCpu) return {false, 0, "--device cpu"};
  if (visible_gpus <= 0) {
    if (request.kind == Kind::kAuto) return {false, 0, fmt::format("--device auto: no GPU visible ({})", no_gpu_detail)};
    throw InputError(fmt::format("--device {}: no GPU is visible to this process ({}); use --device cpu or auto",
                                 request.text, no_gpu_detail));
  }
  if (request.index) {
    if (*request.index >= visible_gpus) {
      throw InputError(fmt::format("--device {}: this process sees {} GPU(s), cuda:0 to cuda:{}", request.text,
                                   visible_gpus, visible_gpus - 1));
    }
    return {true, *request.index, fmt::format("--device {}", request.text)};
  }
  if (local.rank >= visible_gpus) {
    if (allow_shared) {
      const int shared = local.rank % visible_gpus;
      return {true, shared,
              fmt::format("--device {} --allow-shared-gpu: local rank {} of {} shares GPU {} ({} GPU(s) visible)",
                          request.text, local.rank, local.count, shared, visible_gpus)};
    }
    throw InputError(fmt::format(
        "--device {}: this host runs {} workers (counted from {}) and this process sees {} GPU(s), so the worker of "
        "local rank {} has none of its own; run at most {} worker(s) per host, or pass --allow-shared-gpu to share "
        "GPUs on purpose",
        request.text, local.count, local.source, visible_gpus, local.rank, visible_gpus));
  }
  return {true, local.rank,
          fmt::format("--device {}: the GPU of local rank {} of {} ({})", request.text, local.rank, local.count,
                      local.source)};
}

}  // namespace tandem::cluster
