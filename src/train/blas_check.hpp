#pragma once
#include <string>

namespace tandem::train {

struct BlasReport {
  std::string library;   // "openblas (config...)" or "reference/unknown"
  bool fast = false;     // an optimised BLAS is active
  bool oversubscribed = false;  // pthreads OpenBLAS beside torch's OpenMP pool
  double sgemm_gflops = 0;  // measured on a 512x512 float matmul
};

// Detects which BLAS the process resolved and measures it briefly (~10 ms).
BlasReport checkBlas();

// One-line advice shown when the BLAS is slow; empty when it is fine.
std::string blasAdvice(const BlasReport& report);

}  // namespace tandem::train
