// GEMM throughput of the MLP workload (256-4096-4096-256, batch 128, fp32),
// per layer shape and per GEMM of a training step:
//   fwd         y  = x W^T      (M=batch, N=out, K=in)   at::linear (addmm)
//   bwd_input   gx = gy W       (M=batch, N=in,  K=out)  at::mm
//   bwd_weight  gW = gy^T x     (M=out,   N=in,  K=batch) at::mm
// each through LibTorch's BLAS (whatever libblas.so.3 resolved to), and
// through oneDNN (the mkldnn_linear ops of LibTorch 1.13), both on mkldnn
// tensors ("onednn") and on dense tensors converted in and out on every call
// ("onednn_dense", what a drop-in from dense autograd would pay).
//
// It prints which BLAS the process actually loaded (the library that
// provides sgemm_, and the BLAS-like libraries in /proc/self/maps), the
// CPU's fp32 peak with its reasoning next to a measured FMA-loop peak, then
// GFLOP/s per case as median and best of interleaved trials, and % of peak.
// Results are checked: each oneDNN output against the BLAS one.
// Switch BLAS per run with LD_LIBRARY_PATH (bench/blas_candidates.sh).
#include <CLI/CLI.hpp>
#include <dlfcn.h>
#include <fmt/format.h>
#include <immintrin.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- which BLAS is this process using ----------------------------------

template <typename Fn>
Fn symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

// The file that provides `name` to the global scope, links resolved
// (/lib/.../libblas.so.3 is an alternatives link).
std::string libraryOf(const char* name) {
  void* p = ::dlsym(RTLD_DEFAULT, name);
  Dl_info info{};
  if (p == nullptr || ::dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "(not found)";
  std::error_code ec;
  auto real = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::string(info.dli_fname) : real.string();
}

std::vector<std::string> mappedMathLibraries() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    auto base = path.substr(path.rfind('/') + 1);
    for (const char* key : {"blas", "blis", "lapack", "dnnl", "mkl", "gomp", "malloc"}) {
      if (base.find(key) != std::string::npos) found.insert(path);
    }
  }
  return {found.begin(), found.end()};
}

nlohmann::json blasInfo() {
  nlohmann::json j;
  j["sgemm_from"] = libraryOf("sgemm_");
  j["mapped"] = mappedMathLibraries();
  std::string sgemm = j["sgemm_from"];
  if (sgemm.find("blis") != std::string::npos) {
    j["name"] = "blis";
    // Debian's BLIS libblas.so.3 exports only the BLAS symbols; the same
    // build's libblis.so.4 beside it answers which kernels and threads this
    // CPU and environment get.
    auto dir = std::filesystem::path(sgemm).parent_path();
    if (void* h = ::dlopen((dir / "libblis.so.4").c_str(), RTLD_NOW | RTLD_LOCAL)) {
      if (auto version = reinterpret_cast<const char* (*)()>(::dlsym(h, "bli_info_get_version_str"))) {
        j["version"] = version();
      }
      auto arch_id = reinterpret_cast<int (*)()>(::dlsym(h, "bli_arch_query_id"));
      auto arch_str = reinterpret_cast<const char* (*)(int)>(::dlsym(h, "bli_arch_string"));
      if (arch_id && arch_str) j["arch"] = arch_str(arch_id());
      // BLIS ignores omp_set_num_threads: BLIS_NUM_THREADS or OMP_NUM_THREADS, else 1.
      if (auto n = reinterpret_cast<long (*)()>(::dlsym(h, "bli_thread_get_num_threads"))) {
        j["threads"] = std::max(1L, n());  // -1: neither variable set, so 1
      }
    }
  } else if (sgemm.find("openblas") != std::string::npos) {
    j["name"] = "openblas";
    if (auto config = symbol<char* (*)()>("openblas_get_config")) j["config"] = config();
    if (auto core = symbol<char* (*)()>("openblas_get_corename")) j["arch"] = core();
    // No thread count: the OpenMP build follows omp_get_max_threads per call.
  } else if (sgemm.find("/blas/") != std::string::npos) {
    j["name"] = "reference";
  } else {
    j["name"] = "unknown";
  }
  return j;
}

// ---- peak: reasoning from cpuinfo, and a measured FMA loop --------------

struct CpuInfo {
  std::string model, vendor;
  int family = 0, model_id = 0;
  double mhz = 0;
  std::set<std::string> flags;
};

CpuInfo readCpuInfo() {
  CpuInfo c;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  auto value = [](const std::string& l) {
    auto p = l.find(':');
    return p == std::string::npos ? std::string() : l.substr(std::min(l.size(), p + 2));
  };
  while (std::getline(in, line)) {
    if (line.rfind("processor", 0) == 0 && !c.model.empty()) break;  // the first CPU is enough
    if (line.rfind("model name", 0) == 0) c.model = value(line);
    else if (line.rfind("vendor_id", 0) == 0) c.vendor = value(line);
    else if (line.rfind("cpu family", 0) == 0) c.family = std::stoi(value(line));
    else if (line.rfind("model\t", 0) == 0) c.model_id = std::stoi(value(line));
    else if (line.rfind("cpu MHz", 0) == 0) c.mhz = std::stod(value(line));
    else if (line.rfind("flags", 0) == 0) {
      std::istringstream s(value(line));
      std::string f;
      while (s >> f) c.flags.insert(f);
    }
  }
  return c;
}

// fp32 FLOPs per cycle per core, with the reason.
std::pair<int, std::string> flopsPerCycle(const CpuInfo& c) {
  bool avx512 = c.flags.count("avx512f") > 0, fma = c.flags.count("fma") > 0;
  if (c.vendor == "AuthenticAMD") {
    if (c.family == 0x19 && avx512)
      return {32, "AMD family 19h with AVX-512 = Zen 4: two 256-bit FMA pipes; 512-bit ops are double-pumped, "
                  "so 2 x 8 lanes x 2 (FMA) = 32 fp32 FLOPs/cycle, AVX2 or AVX-512 alike"};
    if (c.family == 0x19) return {32, "Zen 3: two 256-bit FMA pipes = 32 fp32 FLOPs/cycle"};
    if (c.family == 0x1a && avx512) return {64, "Zen 5 (server/desktop): native 512-bit FMA x2 = 64 FLOPs/cycle"};
    if (c.family == 0x17 && c.model_id >= 0x30) return {32, "Zen 2: two 256-bit FMA pipes = 32 FLOPs/cycle"};
    if (c.family == 0x17) return {16, "Zen 1: 256-bit ops split into two 128-bit halves = 16 FLOPs/cycle"};
  }
  if (avx512) return {64, "Intel AVX-512: assumed two 512-bit FMA units = 64 FLOPs/cycle (one-unit SKUs: 32)"};
  if (fma) return {32, "AVX2 + FMA: two 256-bit FMA units = 32 FLOPs/cycle"};
  return {8, "SSE: 4-wide add + 4-wide mul = 8 FLOPs/cycle"};
}

constexpr int kChains = 12;  // independent FMAs in flight: > latency x pipes on any current core

__attribute__((target("avx512f"))) float fmaLoop512(int64_t iters) {
  __m512 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], b, c);
  }
  __m512 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
  float out[16];
  _mm512_storeu_ps(out, s);
  float t = 0;
  for (float v : out) t += v;
  return t;
}

__attribute__((target("avx2,fma"))) float fmaLoop256(int64_t iters) {
  __m256 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k));
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], b, c);
  }
  __m256 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, acc[k]);
  float out[8];
  _mm256_storeu_ps(out, s);
  float t = 0;
  for (float v : out) t += v;
  return t;
}

// Aggregate GFLOP/s of `threads` threads each running `iters` loop trips.
double fmaRun(int width, int threads, int64_t iters) {
  std::vector<std::thread> pool;
  std::vector<float> sink(static_cast<size_t>(threads));
  auto t0 = Clock::now();
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] { sink[static_cast<size_t>(i)] = width == 512 ? fmaLoop512(iters) : fmaLoop256(iters); });
  }
  for (auto& th : pool) th.join();
  double s = secondsSince(t0);
  if (sink[0] == 12345.f) fmt::print("");  // keep the result alive
  return static_cast<double>(threads) * static_cast<double>(iters) * kChains * (width / 32) * 2.0 / s / 1e9;
}

// ---- the GEMM cases -----------------------------------------------------

struct Layer {
  std::string name;
  int64_t in, out;
};

struct Case {
  std::string layer, gemm;
  int64_t m, n, k;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Seconds per call: calls fn until min_seconds have passed (at least twice).
double timeCalls(const std::function<void()>& fn, double min_seconds) {
  int calls = 0;
  auto t0 = Clock::now();
  double s = 0;
  do {
    fn();
    ++calls;
    s = secondsSince(t0);
  } while (s < min_seconds || calls < 2);
  return s / calls;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-shape GEMM throughput of the MLP workload: LibTorch's BLAS vs oneDNN"};
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int64_t batch = 128;
  std::vector<int64_t> widths{256, 4096, 4096, 256};
  int trials = 5;
  double min_seconds = 0.15;
  std::vector<std::string> impls{"blas", "onednn", "onednn_dense"};
  double ghz = 0;
  int fpc = 0;
  std::string json_path;
  std::string label;
  app.add_option("--threads", threads, "intra-op threads (at::set_num_threads)");
  app.add_option("--batch", batch, "rows of the activations");
  app.add_option("--widths", widths, "layer widths, input first")->delimiter(',');
  app.add_option("--trials", trials, "interleaved trials per case; median and best are reported");
  app.add_option("--min-seconds", min_seconds, "time per trial per case");
  app.add_option("--impls", impls, "blas, onednn, onednn_dense")->delimiter(',');
  app.add_option("--ghz", ghz, "clock for the theoretical peak (default: cpuinfo's cpu MHz)");
  app.add_option("--flops-per-cycle", fpc, "fp32 FLOPs/cycle/core (default: from the CPU model)");
  app.add_option("--json", json_path, "also write the results as JSON to this file");
  app.add_option("--label", label, "name of this run in the output (e.g. the BLAS candidate)");
  CLI11_PARSE(app, argc, argv);
  if (widths.size() < 2) {
    fmt::print(stderr, "--widths needs at least two values\n");
    return 2;
  }
  at::set_num_threads(threads);
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);

  // Load the BLAS before looking at it: one tiny mm.
  (void)torch::mm(torch::ones({8, 8}), torch::ones({8, 8}));
  nlohmann::json blas = blasInfo();
  CpuInfo cpu = readCpuInfo();
  auto [model_fpc, fpc_reason] = flopsPerCycle(cpu);
  if (fpc == 0) fpc = model_fpc;
  else fpc_reason = "given by --flops-per-cycle";
  if (ghz == 0) ghz = cpu.mhz / 1000.0;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const double nominal_peak = threads * ghz * fpc;
  // An FMA loop measures what the cores really run at (turbo, or a VM host's
  // clock): the best of many short (~3 ms) trials lands in a slice the
  // scheduler gave us whole. The median of three 0.1 s runs on every thread
  // is what we sustain: another job on the cores pulls it down.
  const int width = __builtin_cpu_supports("avx512f") ? 512 : 256;
  auto fmaBest = [&](int n) {
    double r = 0;
    for (int t = 0; t < 30; ++t) r = std::max(r, fmaRun(width, n, 1'000'000));
    return r;
  };
  const double fma1 = fmaBest(1);
  const double fma_n = threads > 1 ? fmaBest(threads) : fma1;
  std::vector<double> sustained;
  for (int t = 0; t < 3; ++t) sustained.push_back(fmaRun(width, threads, 30'000'000));
  const double fma_sustained = median(sustained);
  const double measured_ghz = fma1 / fpc;
  // % of peak is against the measured clock: the nominal one undercounts a turbo.
  const double peak = threads * std::max(ghz, measured_ghz) * fpc;
  const double availability = fma_sustained / fma_n;

  fmt::print("label: {}\n", label.empty() ? "-" : label);
  fmt::print("blas: {} (sgemm_ from {})\n", blas.value("name", "?"), blas["sgemm_from"].get<std::string>());
  if (blas.contains("arch")) fmt::print("  arch: {}\n", blas["arch"].get<std::string>());
  if (blas.contains("version")) fmt::print("  version: {}\n", blas["version"].get<std::string>());
  if (blas.contains("config")) fmt::print("  config: {}\n", blas["config"].get<std::string>());
  if (blas.contains("threads")) {
    fmt::print("  blas threads: {}{}\n", blas["threads"].get<long>(),
               blas.value("name", "") == "blis" ? " (BLIS_NUM_THREADS or OMP_NUM_THREADS; it ignores --threads)" : "");
  }
  for (const auto& m : blas["mapped"]) fmt::print("  mapped: {}\n", m.get<std::string>());
  fmt::print("torch: {} threads, mkldnn {}\n", at::get_num_threads(), at::hasMKLDNN() ? "yes" : "no");
  fmt::print("cpu: {} (vendor {}, family {:#x}, model {:#x}), {} cores\n", cpu.model, cpu.vendor, cpu.family,
             cpu.model_id, cores);
  fmt::print("  {} FLOPs/cycle: {}\n", fpc, fpc_reason);
  fmt::print("  nominal peak = {} threads x {:.2f} GHz (cpuinfo) x {} = {:.1f} GFLOP/s\n", threads, ghz, fpc,
             nominal_peak);
  fmt::print("  FMA loop (avx{}): 1 core {:.1f} GFLOP/s = {:.2f} GHz x {}; {} threads {:.1f} best, {:.1f} sustained ({:.0f}%)\n",
             width, fma1, measured_ghz, fpc, threads, fma_n, fma_sustained, 100 * availability);
  fmt::print("  peak used below = {} x {:.2f} GHz x {} = {:.1f} GFLOP/s\n", threads, std::max(ghz, measured_ghz), fpc,
             peak);
  if (availability < 0.9) {
    fmt::print("  WARNING: the cores are shared with another job ({:.0f}% available): {}-thread numbers are low\n",
               100 * availability, threads);
  }

  // Cases: every Linear layer of the MLP, three GEMMs each.
  std::vector<Layer> layers;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    layers.push_back({fmt::format("{}x{}", widths[i], widths[i + 1]), widths[i], widths[i + 1]});
  }
  struct Bound {
    Case c;
    std::map<std::string, std::function<torch::Tensor()>> run;
  };
  std::vector<Bound> cases;
  double max_rel_err = 0;
  for (const auto& l : layers) {
    // Tensors shared by the layer's three GEMMs; scaled like a real layer's.
    auto x = torch::randn({batch, l.in});
    auto w = torch::randn({l.out, l.in}) / std::sqrt(static_cast<double>(l.in));
    auto b = torch::randn({l.out});
    auto gy = torch::randn({batch, l.out});
    auto xm = x.to_mkldnn(), wm = w.to_mkldnn(), gym = gy.to_mkldnn();
    std::vector<int64_t> in_size{batch, l.in};
    Bound fwd{{l.name, "fwd", batch, l.out, l.in}, {}};
    fwd.run["blas"] = [=] { return at::linear(x, w, b); };
    fwd.run["onednn"] = [=] { return at::mkldnn_linear(xm, wm, b); };
    fwd.run["onednn_dense"] = [=] { return at::mkldnn_linear(x.to_mkldnn(), wm, b).to_dense(); };
    Bound bin{{l.name, "bwd_input", batch, l.in, l.out}, {}};
    bin.run["blas"] = [=] { return at::mm(gy, w); };
    bin.run["onednn"] = [=] { return at::mkldnn_linear_backward_input(in_size, gym, w); };
    bin.run["onednn_dense"] = [=] { return at::mkldnn_linear_backward_input(in_size, gy.to_mkldnn(), w).to_dense(); };
    Bound bw{{l.name, "bwd_weight", l.out, l.in, batch}, {}};
    bw.run["blas"] = [=] { return at::mm(gy.t(), x); };
    bw.run["onednn"] = [=] { return std::get<0>(at::mkldnn_linear_backward_weights(gym, xm, w, false)); };
    bw.run["onednn_dense"] = [=] {
      return std::get<0>(at::mkldnn_linear_backward_weights(gy.to_mkldnn(), x.to_mkldnn(), w, false)).to_dense();
    };
    for (auto* bound : {&fwd, &bin, &bw}) {
      // Verify: every implementation agrees with the BLAS result.
      auto ref = bound->run.at("blas")();
      for (const auto& impl : impls) {
        if (impl == "blas" || !bound->run.count(impl)) continue;
        auto got = bound->run.at(impl)();
        if (got.is_mkldnn()) got = got.to_dense();
        double err = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item<double>();
        max_rel_err = std::max(max_rel_err, err);
        if (err > 1e-3) {
          fmt::print(stderr, "MISMATCH {} {} {}: max rel err {:.2e}\n", bound->c.layer, bound->c.gemm, impl, err);
          return 1;
        }
      }
      cases.push_back(std::move(*bound));
    }
  }

  // Interleaved trials: case by case, every implementation in turn.
  std::map<std::pair<size_t, std::string>, std::vector<double>> gflops;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    for (const auto& impl : impls) {
      for (int w = 0; w < 2; ++w) (void)cases[ci].run.at(impl)();  // warm-up: reorders, page faults
    }
    for (int t = 0; t < trials; ++t) {
      for (const auto& impl : impls) {
        auto& fn = cases[ci].run.at(impl);
        double s = timeCalls([&] { (void)fn(); }, min_seconds);
        gflops[{ci, impl}].push_back(cases[ci].c.flops() / s / 1e9);
      }
    }
  }

  // Best first: on a shared machine, contention only ever subtracts.
  fmt::print("\nGFLOP/s, best (median) of {} trials, and best as % of the {:.1f} GFLOP/s peak; batch {}\n", trials,
             peak, batch);
  fmt::print("{:<10} {:<11} {:>16}", "layer", "gemm", "MxNxK");
  for (const auto& impl : impls) fmt::print(" {:>22}", impl);
  fmt::print("\n");
  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, double> total_seconds;  // one training step's GEMMs, at the best rate
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& c = cases[ci].c;
    fmt::print("{:<10} {:<11} {:>16}", c.layer, c.gemm, fmt::format("{}x{}x{}", c.m, c.n, c.k));
    nlohmann::json row{{"layer", c.layer}, {"gemm", c.gemm}, {"m", c.m}, {"n", c.n}, {"k", c.k}};
    for (const auto& impl : impls) {
      const auto& v = gflops[{ci, impl}];
      double med = median(v), best = *std::max_element(v.begin(), v.end());
      total_seconds[impl] += c.flops() / best / 1e9;
      fmt::print(" {:>8.1f} ({:>5.1f}) {:>4.0f}%", best, med, 100 * best / peak);
      row[impl] = {{"gflops_median", med}, {"gflops_best", best}, {"pct_peak_best", 100 * best / peak}};
    }
    fmt::print("\n");
    rows.push_back(row);
  }
  double step_flops = 0;
  for (const auto& bc : cases) step_flops += bc.c.flops();
  fmt::print("{:<39}", "all GEMMs of one step: ms (GFLOP/s)");
  nlohmann::json totals;
  for (const auto& impl : impls) {
    double s = total_seconds[impl];
    fmt::print(" {:>10.2f} ({:>6.1f})    ", 1e3 * s, step_flops / s / 1e9);
    totals[impl] = {{"ms", 1e3 * s}, {"gflops", step_flops / s / 1e9}, {"pct_peak", 100 * step_flops / s / 1e9 / peak}};
  }
  fmt::print("\nmax relative error of oneDNN vs BLAS: {:.2e}\n", max_rel_err);

  nlohmann::json result{{"label", label},
                        {"blas", blas},
                        {"threads", threads},
                        {"batch", batch},
                        {"widths", widths},
                        {"cpu",
                         {{"model", cpu.model},
                          {"family", cpu.family},
                          {"model_id", cpu.model_id},
                          {"cores", cores},
                          {"ghz", ghz},
                          {"flops_per_cycle", fpc},
                          {"reason", fpc_reason}}},
                        {"peak_gflops", peak},
                        {"nominal_peak_gflops", nominal_peak},
                        {"measured_fma_gflops", {{"one_core", fma1}, {"all_threads", fma_n}, {"all_threads_sustained", fma_sustained}}},
                        {"measured_ghz", measured_ghz},
                        {"availability", availability},
                        {"cases", rows},
                        {"step_gemms", totals},
                        {"max_rel_err", max_rel_err}};
  fmt::print("JSON {}\n", result.dump());
  if (!json_path.empty()) std::ofstream(json_path) << result.dump(2) << "\n";
  return 0;
}
