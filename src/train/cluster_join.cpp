#include "train/cluster_join.hpp"

#include <fmt/format.h>

#include <thread>

#include "cluster/host_groups.hpp"
#include "cluster/job_context.hpp"
#include "cluster/membership.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/patient_wait.hpp"

namespace tandem::train {
namespace {

std::string text(const std::vector<char>& bytes) { return {bytes.begin(), bytes.end()}; }

// A restarted task: waits until the coordinator serves a start other than
// the one that failed, so that it never joins a store about to vanish.
void awaitNextStart(const cluster::ClusterSpec& spec, const net::JobSecurity& security, uint64_t replaced,
                    std::chrono::milliseconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  const std::string failed = cluster::generationText(replaced);
  std::string last = "no answer";
  while (!deadline.expired()) {
    try {
      cluster::CoordinatorClient probe(spec.coordinator, std::chrono::seconds(1), security, spec.coordinatorHost());
      const auto value = probe.tryGet(cluster::kGenerationKey);
      if (value && text(*value) != failed) return;
      last = value ? "it still serves the start that failed" : "it has not started the job yet";
    } catch (const PeerError& e) {
      last = e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw PeerError(fmt::format("{}: the job did not start again (the chief, worker 0, at {}) within {}: {}",
                              spec.taskName(), spec.coordinator.str(), formatDuration(timeout), last));
}

// A task started again by hand (--restart-wait) into a start that still
// counts it as joined: unless the job is elastic (async or SSP PS), that
// start is failing. Returns the start to wait past, 0 when there is none.
uint64_t startBeingReplaced(const cluster::ClusterSpec& spec, const DistributedConfig& config,
                            const net::JobSecurity& security, std::chrono::milliseconds timeout) {
  const bool elastic = spec.numServers() > 0 && psModeOf(config) != Mode::PsSync;
  if (config.restart_wait_s <= 0 || elastic) return 0;
  cluster::CoordinatorClient store(spec.coordinator, timeout, security, spec.coordinatorHost());
  const auto current = store.tryGet(cluster::kGenerationKey);
  if (!current || !store.tryGet(cluster::joinKey("train", spec.role, spec.index))) return 0;
  TANDEM_LOG_WARN("{}: the job's running start already has a {}, so this one was started again after a failure; "
                  "waiting up to {:.0f}s (--restart-wait) for the job's next start",
                  spec.taskName(), spec.taskName(), config.restart_wait_s);
  return cluster::parseGeneration(text(*current));
}

// A task other than the chief, started again after a failed start (by
// restart-in-place, or by hand with --restart-wait): waits for the next one.
void awaitStartAfterFailure(const cluster::ClusterSpec& spec, const DistributedConfig& config,
                            const net::JobSecurity& security, cluster::JobStart& start,
                            std::chrono::milliseconds timeout) {
  if (start.replaces != 0) {
    awaitNextStart(spec, security, start.replaces, timeout);
    return;
  }
  start.replaces = startBeingReplaced(spec, config, security, timeout);
  if (start.replaces != 0) {
    awaitNextStart(spec, security, start.replaces,
                   std::chrono::milliseconds(static_cast<int64_t>(config.restart_wait_s * 1000)));
  }
}

}  // namespace

ClusterJoin joinAsWorker(const cluster::ClusterSpec& spec, const DistributedConfig& config,
                         const nlohmann::json& fingerprint, cluster::JobContext& context) {
  cluster::JobStart& start = context.start();
  const net::JobSecurity& security = context.security();
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(cluster::startupSeconds(start, config.rendezvous_timeout_s) * 1000));
  ClusterJoin join;
  // The chief starts the job unless launch started it again into a running one.
  const bool starts_job = spec.isChief() && !start.joins_running;
  if (spec.isChief() && !spec.coordinator_external) {
    join.server = std::make_unique<cluster::CoordinatorServer>(config.bind.empty() ? spec.coordinator.host : config.bind,
                                                               spec.coordinator.port, security);
  }
  // A chief launch started into a running job joins the start it finds.
  if (starts_job) {
    start.generation = cluster::newGeneration();
  } else if (!spec.isChief()) {
    awaitStartAfterFailure(spec, config, security, start, timeout);
  }
  const Deadline deadline = Deadline::after(timeout);
  join.store = std::make_unique<cluster::CoordinatorClient>(spec.coordinator, timeout, security, spec.coordinatorHost());
  if (starts_job) {
    const std::string g = cluster::generationText(start.generation);
    join.store->set(cluster::kGenerationKey, std::vector<char>(g.begin(), g.end()), deadline);
  }
  cluster::joinCluster(*join.store, spec, fingerprint, deadline);
  if (!starts_job) start.generation = cluster::parseGeneration(text(join.store->get(cluster::kGenerationKey)));
  if (start.replaces != 0) {
    TANDEM_LOG_INFO("{}: rejoined the job's next start ({} replaces {})", spec.taskName(),
                    cluster::generationText(start.generation), cluster::generationText(start.replaces));
  }
  return join;
}

void noticeJoinByHand(const cluster::ClusterSpec& spec, const DistributedConfig& config, cluster::JobContext& context) {
  cluster::JobStart& start = context.start();
  if (start.joins_running || start.replaces != 0 || config.restart_wait_s > 0 || spec.role != cluster::Role::kWorker ||
      spec.isChief() || spec.numServers() == 0 || psModeOf(config) != Mode::PsSync || config.local_steps > 0 ||
      cluster::useHostGroups(cluster::workersByHost(spec), config.hierarchical)) {
    return;
  }
  try {
    cluster::CoordinatorClient probe(spec.coordinator, std::chrono::seconds(1), context.security(),
                                     spec.coordinatorHost());
    if (!probe.tryGet(cluster::kGenerationKey) || !probe.tryGet(cluster::joinKey("train", spec.role, spec.index))) {
      return;
    }
  } catch (const PeerError&) {
    return;  // no store up yet: a first start, which the rendezvous waits for
  }
  start.joins_running = start.joined_by_hand = true;
  TANDEM_LOG_WARN("{}: the running job already counts a {}, so this one was started again after it died; it joins "
                  "the job at a step boundary, from the servers' parameters (given --restart-wait, the job would "
                  "restart from its newest checkpoint instead)",
                  spec.taskName(), spec.taskName());
}

}  // namespace tandem::train
