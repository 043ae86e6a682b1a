#pragma once
// LibTorch's CUDA half (libtorch_cuda.so, and cuBLAS, cuDNN, NCCL ... under
// it) is loaded at run time, and only where a GPU driver is. Linked in, it
// made every process (launcher, servers, workers, tests) map it: about
// 0.8 s and 370 MB more per start on a machine that has no GPU at all.
#include <string>

#include "core/environment.hpp"

namespace tandem::train {

enum class CudaLibraryState {
  kNotBuilt,  // this LibTorch has no libtorch_cuda.so (a CPU wheel)
  kNoDriver,  // no libcuda.so.1 here: nothing to run CUDA on
  kSkipped,   // TANDEM_LIBTORCH_CUDA=never
  kLoaded,
  kFailed,    // libtorch_cuda.so would not load (detail says why)
};

struct CudaLibrary {
  CudaLibraryState state = CudaLibraryState::kNotBuilt;
  std::string path;    // libtorch_cuda.so beside libtorch_cpu.so
  std::string detail;  // why not loaded, in words
};

// Loads libtorch_cuda.so (RTLD_GLOBAL, so that it registers LibTorch's CUDA
// kernels and hooks) the first time it is called, when `env`'s
// TANDEM_LIBTORCH_CUDA says auto (the default: where libcuda.so.1 loads),
// always, or never. Later calls return the first answer. Thread-safe.
const CudaLibrary& loadLibTorchCuda(const Environment& env);

// "loaded", "not loaded: no GPU driver", ... for --version and summaries.
std::string describe(const CudaLibrary& cuda);

}  // namespace tandem::train
