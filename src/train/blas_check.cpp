#include "train/blas_check.hpp"

#include <cpuid.h>
#include <dlfcn.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "train/runtime_info.hpp"

namespace tandem::train {

namespace {

// The file that provides sgemm_, links resolved: Debian's alternatives make
// libblas.so.3 any of OpenBLAS, BLIS or the reference BLAS, and OpenBLAS's
// own symbols are loaded either way (LAPACK pulls them in).
std::string sgemmProvider() {
  Dl_info info{};
  void* sgemm = ::dlsym(RTLD_DEFAULT, "sgemm_");
  if (sgemm == nullptr || ::dladdr(sgemm, &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  auto real = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::string(info.dli_fname) : real.string();
}

template <class Fn>
Fn openBlasSymbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

bool isAmdZen4() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  if (std::strcmp(vendor, "AuthenticAMD") != 0 || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  unsigned family = (eax >> 8) & 0xf;
  if (family == 0xf) family += (eax >> 20) & 0xff;
  return family == 0x19;
}

}  // namespace

std::optional<std::string> preferredOpenBlasCore() {
  auto corename = openBlasSymbol<char* (*)()>("openblas_get_corename");
  if (corename == nullptr || !isAmdZen4()) return std::nullopt;
  const std::string core = corename();
  if (core != "Cooperlake" && core != "SkylakeX") return std::nullopt;
  return std::string("Haswell");
}

bool selectPreferredOpenBlasCore(Environment& env) {
  if (env.contains("OPENBLAS_CORETYPE")) return false;
  auto core = preferredOpenBlasCore();
  if (!core) return false;
  env.emplace("OPENBLAS_CORETYPE", *core);
  return ::setenv("OPENBLAS_CORETYPE", core->c_str(), 0) == 0;
}

BlasReport describeBlas(const RuntimeInfo& runtime) {
  BlasReport report;
  // LibTorch says which BLAS its matmuls call: the PyPI wheel's MKL lives
  // inside libtorch_cpu, where no dlsym of sgemm_ finds it; a torch built
  // against a system BLAS resolves sgemm_ from that library.
  const std::string& blas = runtime.blas;
  const std::string provider = sgemmProvider();
  auto openblas_config = openBlasSymbol<char* (*)()>("openblas_get_config");
  auto corename = openBlasSymbol<char* (*)()>("openblas_get_corename");
  auto parallel = openBlasSymbol<int (*)()>("openblas_get_parallel");
  if (blas == "mkl") {
    report.library = runtime.blas_version.empty() ? "mkl" : fmt::format("mkl ({})", runtime.blas_version);
    report.fast = true;
  } else if (provider.find("openblas") != std::string::npos && openblas_config != nullptr) {
    report.library =
        fmt::format("openblas ({}; kernels {})", openblas_config(), corename != nullptr ? corename() : "?");
    report.fast = true;
    // 1 = pthreads: its own thread pool competes with torch's OpenMP team.
    report.oversubscribed = parallel != nullptr && parallel() == 1;
  } else if (provider.find("blis") != std::string::npos) {
    report.library = fmt::format("blis ({})", provider);
    report.fast = true;
  } else {
    report.library = fmt::format("{} ({})", blas.empty() ? "unknown BLAS" : blas,
                                 provider.empty() ? "no sgemm_ in the process" : provider);
  }
  return report;
}

BlasReport checkBlas(const RuntimeInfo& runtime) {
  BlasReport report = describeBlas(runtime);
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
  if (auto core = preferredOpenBlasCore()) {
    return fmt::format("OpenBLAS runs its AVX-512 kernels on this AMD Zen 4 CPU, where its {} kernels are 8-15% "
                       "faster on training GEMMs; tandem sets OPENBLAS_CORETYPE={} itself unless the variable is "
                       "set (it is set to something else here)",
                       *core, *core);
  }
  if (report.oversubscribed) {
    return "OpenBLAS is the pthreads build: its threads compete with torch's OpenMP threads (about 2x slower "
           "steps on small models). Fix: update-alternatives --set libopenblas.so.0-x86_64-linux-gnu "
           "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 (scripts/setup.sh does this)";
  }
  if (report.fast) return {};
  return fmt::format(
      "LibTorch's BLAS is not an optimised one ({}: {:.1f} GFLOP/s on sgemm); training will be up to 10x slower. "
      "Fix: build against the torch wheel scripts/setup.sh installs (MKL inside LibTorch)",
      report.library, report.sgemm_gflops);
}

}  // namespace tandem::train
