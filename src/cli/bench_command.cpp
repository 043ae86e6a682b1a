// `tandem bench allreduce`: starts N local worker processes and measures
// Gloo all-reduce bandwidth between them, next to loopback TCP's peak.
// `tandem bench ps-apply`: the parameter server's optimizer kernels per core.
#include <fmt/format.h>
#include "cluster/kv_store.hpp"
#include <nlohmann/json.hpp>

#include <fstream>

#include "cli/commands.hpp"
#include "cluster/coordinator.hpp"
#include "launch/free_ports.hpp"
#include "launch/process_group.hpp"
#include "bench/allreduce_bench.hpp"
#include "core/error.hpp"
#include "bench/ps_apply_bench.hpp"

namespace tandem::cli {
namespace {

struct AllreduceBenchOptions {
  int workers = 2;
  std::string sizes = "4K..256M";
  std::string host = "127.0.0.1";
  std::string json_out;
  double timeout_s = 120;
  // Set by the parent for each worker process.
  int rank = -1;
  std::string coordinator;
  double loopback_gbps = 0;
};

std::string humanBytes(size_t bytes) {
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= (size_t{1} << 10) && bytes % (size_t{1} << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}B", bytes);
}

int runWorker(const AllreduceBenchOptions& o, const std::vector<size_t>& sizes, const Environment& env) {
  cluster::HostPort coordinator = cluster::parseHostPort(o.coordinator, "--coordinator");
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  // The user's secret (or TANDEM_SECRET_FILE), as a job's tasks default to.
  const net::JobSecurity security = net::resolveJobSecurity("", false, env);
  std::unique_ptr<cluster::CoordinatorServer> server;
  if (o.rank == 0) server = std::make_unique<cluster::CoordinatorServer>(coordinator.host, coordinator.port, security);
  cluster::CoordinatorClient store(coordinator, timeout, security);
  cluster::PrefixStore prefixed("bench", store);
  collective::CommunicatorOptions options;
  options.rank = o.rank;
  options.size = o.workers;
  options.local_host = o.host;
  options.timeout = timeout;
  auto comm = collective::Communicator::connect(prefixed, options);
  auto rows = bench::runAllreduceBench(*comm, sizes);
  comm->barrier();
  if (o.rank != 0) return 0;

  fmt::print("all-reduce (sum, float32), {} workers on {}, Gloo TCP (LibTorch's, ring); loopback TCP single stream: {:.2f} GB/s\n",
             o.workers, o.host, o.loopback_gbps);
  fmt::print("{:>8} {:>6} {:>12} {:>12} {:>12} {:>11} {:>6}\n", "size", "iters", "time (us)", "algbw GB/s",
             "busbw GB/s", "busbw/peak", "exact");
  nlohmann::json results = nlohmann::json::array();
  for (const auto& r : rows) {
    const double fraction = o.loopback_gbps > 0 ? r.busbw_gbps / o.loopback_gbps : 0;
    fmt::print("{:>8} {:>6} {:>12.1f} {:>12.3f} {:>12.3f} {:>11.3f} {:>6}\n", humanBytes(r.bytes), r.iterations,
               r.seconds * 1e6, r.algbw_gbps, r.busbw_gbps, fraction, r.exact ? "yes" : "NO");
    results.push_back({{"bytes", r.bytes}, {"iterations", r.iterations}, {"seconds", r.seconds},
                       {"algbw_gbps", r.algbw_gbps}, {"busbw_gbps", r.busbw_gbps},
                       {"busbw_over_loopback", fraction}, {"exact", r.exact}});
    if (!r.exact) std::fprintf(stderr, "error: all-reduce of %s gave a wrong sum: %s\n", humanBytes(r.bytes).c_str(),
                               r.mismatch.c_str());
  }
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    out << nlohmann::json{{"workers", o.workers}, {"loopback_tcp_gbps", o.loopback_gbps}, {"rows", results}}.dump(2)
        << "\n";
    if (!out) throw InputError(fmt::format("--json: cannot write {}", o.json_out));
  }
  // A benchmark of a collective that computes wrong sums measured nothing.
  for (const auto& r : rows) {
    if (!r.exact) return 1;
  }
  return 0;
}

int runAllreduceBench(const AllreduceBenchOptions& o, const Environment& env) {
  if (o.workers < 1) throw InputError(fmt::format("--workers: must be >= 1, got {}", o.workers));
  const auto sizes = bench::parseByteSizes(o.sizes);
  if (o.rank >= 0) return runWorker(o, sizes, env);

  const double loopback = bench::measureLoopbackTcpGbps();
  const std::string coordinator = cluster::HostPort{o.host, launch::pickFreePort(o.host)}.str();
  launch::ProcessGroup group(env, /*prefix_output=*/false);
  for (int i = 0; i < o.workers; ++i) {
    launch::ChildSpec child;
    child.name = fmt::format("worker {}", i);
    child.argv = {launch::selfExecutable(), "bench", "allreduce", "--workers", std::to_string(o.workers),
                  "--sizes", o.sizes, "--host", o.host,
                  "--timeout", fmt::format("{}", o.timeout_s),
                  "--rank", std::to_string(i), "--coordinator", coordinator,
                  "--loopback-gbps", fmt::format("{}", loopback)};
    if (!o.json_out.empty()) {
      child.argv.push_back("--json");
      child.argv.push_back(o.json_out);
    }
    group.start(child);
  }
  auto result = group.wait(std::chrono::seconds(5));
  if (!result.ok) {
    std::fprintf(stderr, "bench allreduce: %s\n", result.first_failure.c_str());
    return 1;
  }
  return 0;
}

int runApplyBench(int64_t floats, double seconds) {
  const auto rows = bench::runApplyBench(floats, seconds);
  fmt::print("server apply throughput, one core, {:.0f} MB of float32 gradient per pass\n", floats * 4 / 1e6);
  fmt::print("{:>20} {:>10} {:>10} {:>10}\n", "kernel", "ms/pass", "GB/s", "vs memcpy");
  for (const auto& r : rows) {
    fmt::print("{:>20} {:>10.2f} {:>10.2f} {:>10.3f}\n", r.kernel, r.seconds * 1e3, r.gbps, r.vs_memcpy);
  }
  return 0;
}

}  // namespace

Command addBenchCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Benchmarks");
  cmd->require_subcommand(1);
  auto* allreduce = cmd->add_subcommand(
      "allreduce", "All-reduce bandwidth between N local worker processes (algbw, busbw, vs loopback TCP)");
  auto o = std::make_shared<AllreduceBenchOptions>();
  allreduce->add_option("--workers", o->workers, "worker processes")->capture_default_str();
  allreduce->add_option("--sizes", o->sizes, "sizes: 4K..256M (x4 steps) or a list 64K,1M")->capture_default_str();
  allreduce->add_option("--host", o->host, "address the workers use")->capture_default_str();
  allreduce->add_option("--json", o->json_out, "also write the results as JSON to this file");
  allreduce->add_option("--timeout", o->timeout_s, "seconds a worker waits for a peer")->capture_default_str();
  const char* internal = "";  // hidden: set by the parent for its workers
  allreduce->add_option("--rank", o->rank)->group(internal);
  allreduce->add_option("--coordinator", o->coordinator)->group(internal);
  allreduce->add_option("--loopback-gbps", o->loopback_gbps)->group(internal);

  auto* apply = cmd->add_subcommand(
      "ps-apply", "Parameter-server optimizer throughput on one core (SGD, Adam) next to memcpy");
  auto mb = std::make_shared<double>(64);
  auto seconds = std::make_shared<double>(2);
  apply->add_option("--mb", *mb, "buffer size in MB (beyond the caches)")->capture_default_str();
  apply->add_option("--seconds", *seconds, "minimum time per kernel")->capture_default_str();
  return {cmd, [o, allreduce, mb, seconds](const Environment& env) {
    if (allreduce->parsed()) return runAllreduceBench(*o, env);
    return runApplyBench(static_cast<int64_t>(*mb * 1e6 / 4), *seconds);
  }};
}

}  // namespace tandem::cli
