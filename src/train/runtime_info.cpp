#include "train/runtime_info.hpp"

#include <ATen/Version.h>
#include <torch/cuda.h>
#include <torch/version.h>

namespace tandem::train {

std::string torchBuildSetting(const std::string& key) {
  const std::string config = at::show_config();
  const auto at = config.find(key + "=");
  if (at == std::string::npos) return {};
  const auto begin = at + key.size() + 1;
  return config.substr(begin, config.find_first_of(",\n", begin) - begin);
}

RuntimeInfo runtimeInfo() {
  RuntimeInfo info;
  info.libtorch = TORCH_VERSION;
  if (torchBuildSetting("USE_CUDA") == "1" || torchBuildSetting("USE_CUDA") == "ON") {
    info.cuda_build = torchBuildSetting("CUDA_VERSION");
  }
  info.cuda_devices = static_cast<int>(torch::cuda::device_count());
  info.blas = torchBuildSetting("BLAS_INFO");
  return info;
}

}  // namespace tandem::train
