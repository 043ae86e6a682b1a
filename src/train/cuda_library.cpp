#include "train/cuda_library.hpp"

#include <ATen/Version.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "core/logging.hpp"

namespace tandem::train {
namespace {

// The directory of the libtorch_cpu.so this process runs.
std::filesystem::path libTorchDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::show_config), &info) == 0 || info.dli_fname == nullptr) return {};
  return std::filesystem::path(info.dli_fname).parent_path();
}

CudaLibrary load(const Environment& env) {
  CudaLibrary cuda;
  const std::filesystem::path dir = libTorchDirectory();
  cuda.path = (dir / "libtorch_cuda.so").string();
  if (dir.empty() || !std::filesystem::exists(cuda.path)) {
    cuda.detail = "this LibTorch has no CUDA";
    return cuda;
  }
  std::string mode = variableOr(env, "TANDEM_LIBTORCH_CUDA", "");
  if (mode.empty()) mode = "auto";
  if (mode == "never") {
    cuda.state = CudaLibraryState::kSkipped;
    cuda.detail = "TANDEM_LIBTORCH_CUDA=never";
    return cuda;
  }
  if (mode != "always") {
    if (mode != "auto") TANDEM_LOG_WARN("TANDEM_LIBTORCH_CUDA={}: expected auto, always or never; using auto", mode);
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) {
      cuda.state = CudaLibraryState::kNoDriver;
      cuda.detail = "no GPU driver (libcuda.so.1)";
      return cuda;
    }
    dlclose(driver);
  }
  if (dlopen(cuda.path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    cuda.state = CudaLibraryState::kFailed;
    cuda.detail = why != nullptr ? why : "dlopen failed";
    TANDEM_LOG_WARN("LibTorch's CUDA library did not load, so this process runs on CPU only: {}", cuda.detail);
    return cuda;
  }
  cuda.state = CudaLibraryState::kLoaded;
  return cuda;
}

}  // namespace

const CudaLibrary& loadLibTorchCuda(const Environment& env) {
  static const CudaLibrary cuda = load(env);  // the first caller loads; C++ makes the rest wait
  return cuda;
}

std::string describe(const CudaLibrary& cuda) {
  return cuda.state == CudaLibraryState::kLoaded ? "loaded" : fmt::format("not loaded: {}", cuda.detail);
}

}  // namespace tandem::train
