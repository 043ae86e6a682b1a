#include "train/runtime_info.hpp"

#include <ATen/Version.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "train/cuda_library.hpp"

namespace tandem::train {
namespace {

// The value of `key=` in LibTorch's build settings, or "" when absent.
std::string buildSetting(const std::string& config, const std::string& key) {
  const auto at = config.find(key + "=");
  if (at == std::string::npos) return {};
  const auto begin = at + key.size() + 1;
  return config.substr(begin, config.find_first_of(",\n", begin) - begin);
}

// The rest of the line that follows `prefix` ("Intel(R) oneAPI Math Kernel
// Library Version "), or "".
std::string lineAfter(const std::string& config, const std::string& prefix) {
  const auto at = config.find(prefix);
  if (at == std::string::npos) return {};
  const auto begin = at + prefix.size();
  return config.substr(begin, config.find('\n', begin) - begin);
}

}  // namespace

RuntimeInfo runtimeInfo(const Environment& env) {
  const CudaLibrary& cuda = loadLibTorchCuda(env);
  const std::string config = at::show_config();
  RuntimeInfo info;
  info.libtorch = TORCH_VERSION;
  const std::string use_cuda = buildSetting(config, "USE_CUDA");
  if (use_cuda == "1" || use_cuda == "ON") info.cuda_build = buildSetting(config, "CUDA_VERSION");
  info.cuda_library = describe(cuda);
  info.cuda_devices = static_cast<int>(torch::cuda::device_count());
  info.blas = buildSetting(config, "BLAS_INFO");
  if (info.blas == "mkl") info.blas_version = lineAfter(config, "Intel(R) oneAPI Math Kernel Library Version ");
  return info;
}

}  // namespace tandem::train
