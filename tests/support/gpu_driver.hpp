#pragma once
// Whether this machine has a GPU driver (libcuda.so.1 loads): where it does,
// LibTorch's CUDA half loads and --device auto takes a GPU.
#include <dlfcn.h>

namespace tandem::testing {

inline bool gpuDriverHere() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver != nullptr) dlclose(driver);
  return driver != nullptr;
}

}  // namespace tandem::testing
