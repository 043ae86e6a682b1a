#include "cli/ps_task.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <thread>

#include "cluster/local_address.hpp"
#include "cluster/server_addresses.hpp"
#include "core/logging.hpp"
#include "obs/metrics_writer.hpp"
#include "ps/server.hpp"
#include "ps/staleness_counts.hpp"
#include "train/run_directory.hpp"

namespace tandem::cli {
namespace {

// --ps K under a launcher: the workers learn where this server listens from
// the coordinator's store (worker 0's, which may start after this task).
void publishAddress(const cluster::ClusterSpec& spec, const train::TrainConfig& config,
                    const net::JobSecurity& security, const cluster::HostPort& bound) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.distributed.rendezvous_timeout_s * 1000));
  cluster::CoordinatorClient store(spec.coordinator, timeout, security, spec.coordinatorHost());
  cluster::publishServerAddress(store, spec.index, bound, Deadline::after(timeout));
}

}  // namespace

int runPsTask(const cluster::ClusterSpec& spec, const train::TrainConfig& config, const net::JobSecurity& security) {
  const auto& address = spec.ps_hosts.at(static_cast<size_t>(spec.index));
  ps::ServerOptions options;
  options.bind_host = cluster::bindableAddress(config.distributed.bind.empty() ? address.host : config.distributed.bind);
  options.port = address.port;
  options.index = spec.index;
  options.apply_threads = config.distributed.ps_threads > 0
                              ? config.distributed.ps_threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The chief initialises servers right after every worker joined.
  options.startup_timeout_s = config.distributed.rendezvous_timeout_s + 30;
  const std::filesystem::path dir = std::filesystem::path(config.out_dir) / "ps" / fmt::format("ps-{}", spec.index);
  // This server's own corner of the run directory: the chief's --overwrite leaves ps/ to the servers.
  if (config.overwrite) train::clearRunDirectory(dir);
  std::optional<obs::Timeline> timeline;  // written when the server is done
  if (config.timeline) {
    std::filesystem::create_directories(dir);
    timeline.emplace(dir / fmt::format("timeline-ps-{}.json", spec.index), spec.taskName(), 1000 + spec.index,
                     std::array<std::string, 3>{"pushes queued", "apply", "pulls waiting"});
    options.timeline = &*timeline;
  }
  nlohmann::json summary;
  while (true) {
    ps::ParameterServer server(options, security);
    const cluster::HostPort bound{address.host, server.port()};
    if (spec.servers_published) publishAddress(spec, config, security, bound);
    TANDEM_LOG_INFO("{}: listening on {} for {} worker(s) ({})", spec.taskName(), bound.str(), spec.num_workers,
                    spec.source);
    summary = server.serve();
    std::filesystem::create_directories(dir);
    obs::writeFileAtomically(dir / "summary.json", summary.dump(2) + "\n");
    const auto& lost = summary.at("lost_workers");
    if (lost.empty()) break;
    // The chief's init set the mode (an API job's flags here do not say it).
    const bool async = summary.at("mode") == std::string(modeName(Mode::PsAsync));
    // Async training goes on without lost workers; it failed only if none is left.
    const bool failed = !async || lost.size() == summary.at("workers").get<size_t>();
    if (failed && config.distributed.restart_wait_s > 0) {
      TANDEM_LOG_WARN("{}: lost worker(s) {}; waiting up to {:.0f}s (--restart-wait) for the job's next start",
                      spec.taskName(), lost.dump(), config.distributed.restart_wait_s);
      options.startup_timeout_s = config.distributed.restart_wait_s;
      continue;
    }
    TANDEM_LOG_WARN("{}: lost worker(s) {} during the run{}", spec.taskName(), lost.dump(),
                    async ? "; async training went on without them" : "");
    return failed ? 1 : 0;
  }
  TANDEM_LOG_INFO("{}: all workers done; {} model updates, {:.2f} GB/s applied{}", spec.taskName(),
                  summary.at("model_updates").get<uint64_t>(), summary.at("apply_gb_per_s").get<double>(),
                  ps::describeStaleness(summary));
  return 0;
}

}  // namespace tandem::cli
