#pragma once
// Which device a worker trains on, decided from --device, the GPUs this
// process sees and the worker's place among its host's workers. Torch-free
// policy: the caller counts the GPUs (train/device.hpp), so every rule here
// is tested without one. Parameter servers never ask: they stay on CPU.
#include <optional>
#include <string>
#include <string_view>

#include "cluster/cluster_spec.hpp"

namespace tandem::cluster {

struct DeviceRequest {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  std::optional<int> index;  // cuda:N
  std::string text = "auto";
};

// "auto", "cpu", "cuda" or "cuda:N". Throws InputError naming --device.
DeviceRequest parseDeviceRequest(std::string_view text);

// This worker's index among the job's workers on its host, and how many
// there are: from a spec that lists hosts (flags, TF_CONFIG, `tandem
// launch`), else LOCAL_RANK (torchrun), OMPI_COMM_WORLD_LOCAL_RANK,
// MPI_LOCALRANKID (MPICH) or SLURM_LOCALID; 0 of 1 for a lone process.
struct LocalRank {
  int rank = 0;
  int count = 1;
  std::string source = "standalone";
};
LocalRank findLocalRank(const std::optional<ClusterSpec>& spec, const Environment& env);

struct DevicePlacement {
  bool cuda = false;
  int index = 0;       // the CUDA device, among those visible
  std::string reason;  // why this device, for the log and summary.json
  std::string text() const;  // "cpu" or "cuda:N"
};

// `visible_gpus`: what this process can use (CUDA_VISIBLE_DEVICES applied);
// `no_gpu_detail` says why none is, when none is. auto takes the GPU of the
// worker's local rank when any GPU is visible, else the CPU; cuda the same,
// and with none visible it is an error; cuda:N that GPU, named on purpose.
// Two workers of a host never get one GPU by the rank mapping unless
// `allow_shared` (--allow-shared-gpu): then local rank r takes GPU
// r mod visible; without it a local rank with no GPU of its own is an
// InputError naming the counts.
DevicePlacement placeDevice(const DeviceRequest& request, int visible_gpus, const LocalRank& local,
                            std::string_view no_gpu_detail, bool allow_shared = false);

}  // namespace tandem::cluster
