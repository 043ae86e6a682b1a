#pragma once
// Which LibTorch, CUDA and BLAS this process runs: `tandem --version` and
// every summary.json say it, so a result names what produced it.
#include <string>

#include "core/environment.hpp"

namespace tandem::train {

struct RuntimeInfo {
  std::string libtorch;       // "2.15.0"
  std::string cuda_build;     // the CUDA LibTorch was built with ("13.2"), or "" for a CPU-only LibTorch
  std::string cuda_library;   // whether LibTorch's CUDA half is loaded here, and if not why (cuda_library.hpp)
  int cuda_devices = 0;       // GPUs this process can see (0 without a driver or the CUDA half)
  std::string blas;           // LibTorch's BLAS as its build settings name it ("mkl")
  std::string blas_version;   // its version line where LibTorch gives one ("2024.2-Product Build ..."), or ""
};

// Read from LibTorch's build settings (at::show_config()), once a call;
// loads LibTorch's CUDA half first where `env` says it should
// (loadLibTorchCuda).
RuntimeInfo runtimeInfo(const Environment& env);

}  // namespace tandem::train
