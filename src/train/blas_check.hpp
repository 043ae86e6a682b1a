#pragma once
// Which BLAS LibTorch's matmuls reach, how fast it is, and which OpenBLAS
// kernels to run on this CPU.
#include <optional>
#include <string>

#include "core/environment.hpp"

#include "train/runtime_info.hpp"

namespace tandem::train {

struct BlasReport {
  std::string library;   // LibTorch's BLAS and its version ("mkl (2024.2-Product Build ...)"), or the
                         // file sgemm_ resolves to, with OpenBLAS's config and kernel set
  bool fast = false;     // an optimised BLAS is active
  bool oversubscribed = false;  // pthreads OpenBLAS beside torch's OpenMP pool
  double sgemm_gflops = 0;  // measured on a 512x512 float matmul
};

// Which BLAS LibTorch's matmuls reach, from `runtime` and the process's
// symbols; no measurement (sgemm_gflops stays 0).
BlasReport describeBlas(const RuntimeInfo& runtime);
// describeBlas, then a brief measurement (~10 ms).
BlasReport checkBlas(const RuntimeInfo& runtime);

// One-line advice shown when the BLAS is slow; empty when it is fine.
std::string blasAdvice(const BlasReport& report);

// The OpenBLAS kernel set this CPU runs fastest when OpenBLAS picks another
// by itself, or nothing. On AMD Zen 4 (family 0x19 with AVX-512) Debian's
// OpenBLAS 0.3.21 picks its AVX-512 "Cooperlake"/"SkylakeX" kernels, but
// Zen 4 executes 512-bit FMAs as two 256-bit halves: its AVX2 "Haswell"
// kernels ran the MLP's GEMMs 1.08x (1 thread) to 1.15x (2 threads) faster
// here (bench/blas_candidates.sh, docs/results/standalone.md).
std::optional<std::string> preferredOpenBlasCore();

// OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded. If `env` lacks
// the variable and preferredOpenBlasCore() names a kernel set, sets it in
// `env` (for the processes started from here) and in this process (for
// its own re-execution), and returns true. A user's own OPENBLAS_CORETYPE
// is always kept.
bool selectPreferredOpenBlasCore(Environment& env);

}  // namespace tandem::train
