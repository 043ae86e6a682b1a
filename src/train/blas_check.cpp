#include "train/blas_check.hpp"

#include <dlfcn.h>
#include <torch/torch.h>

#include "core/clock.hpp"
#include "core/error.hpp"

namespace tandem::train {

BlasReport checkBlas() {
  BlasReport report;
  // OpenBLAS exports openblas_get_config; the reference BLAS does not.
  using ConfigFn = char* (*)();
  auto config = reinterpret_cast<ConfigFn>(::dlsym(RTLD_DEFAULT, "openblas_get_config"));
  using ParallelFn = int (*)();
  auto parallel = reinterpret_cast<ParallelFn>(::dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (config != nullptr) {
    report.library = fmt::format("openblas ({})", config());
    report.fast = true;
    // 1 = pthreads: its own thread pool competes with torch's OpenMP team.
    report.oversubscribed = parallel != nullptr && parallel() == 1;
  } else {
    report.library = "reference or unknown BLAS";
  }
  torch::NoGradGuard no_grad;
  auto a = torch::ones({512, 512});
  auto b = torch::ones({512, 512});
  (void)torch::mm(a, b);  // warm-up: thread pool start and page faults
  Stopwatch watch;
  constexpr int kReps = 3;
  for (int i = 0; i < kReps; ++i) (void)torch::mm(a, b);
  double seconds = watch.elapsed();
  report.sgemm_gflops = seconds > 0 ? kReps * 2.0 * 512 * 512 * 512 / seconds / 1e9 : 0;
  return report;
}

std::string blasAdvice(const BlasReport& report) {
  if (report.oversubscribed) {
    return "OpenBLAS is the pthreads build: its threads compete with torch's OpenMP threads (about 2x slower "
           "steps on small models). Fix: update-alternatives --set libopenblas.so.0-x86_64-linux-gnu "
           "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 (scripts/setup.sh does this)";
  }
  if (report.fast) return {};
  return fmt::format(
      "BLAS is not OpenBLAS ({}: {:.1f} GFLOP/s on sgemm); training will be up to 10x slower. Fix: "
      "apt-get install libopenblas0-openmp && update-alternatives --set libblas.so.3-x86_64-linux-gnu "
      "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3",
      report.library, report.sgemm_gflops);
}

}  // namespace tandem::train
