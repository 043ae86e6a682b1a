#include "train/live_membership.hpp"

#include <fmt/format.h>

#include <cstring>
#include <sstream>
#include <thread>

#include "core/deadline.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/patient_wait.hpp"
#include "train/device.hpp"
#include "train/module_broadcast.hpp"

namespace tandem::train {
LiveMembership::LiveMembership(const cluster::ClusterSpec& spec, const cluster::QuorumOptions& options,
                               cluster::CoordinatorClient& store, const net::JobSecurity& security)
    : worker_(spec.index), options_(options), store_(store) {
  for (int w = 0; w < spec.num_workers; ++w) current_.workers.push_back(w);
  link_ = std::make_unique<cluster::QuorumLink>(spec.coordinator, spec.coordinatorHost(), security, worker_,
                                                options.beat_interval, options.heartbeat_timeout);
}

LiveMembership::~LiveMembership() = default;

namespace {
constexpr const char* kRunningKey = "tandem/live-running";
}

bool LiveMembership::jobIsRunning(cluster::CoordinatorClient& store) { return store.tryGet(kRunningKey).has_value(); }

void LiveMembership::markRunning(cluster::CoordinatorClient& store) { store.set(kRunningKey, {'1'}); }

void LiveMembership::awaitRunning(cluster::CoordinatorClient& store, const cluster::ClusterSpec& spec,
                                  Deadline deadline) {
  const std::string budget = formatDuration(deadline.remaining());
  auto pause = std::chrono::milliseconds(10);
  while (!jobIsRunning(store)) {
    if (deadline.expired()) {
      throw PeerError(fmt::format("{}: beyond the {} listed workers, it can only join a running job, and none ran "
                                  "at the coordinator {} within {}",
                                  spec.taskName(), spec.num_workers, spec.coordinator.str(), budget));
    }
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(pause, deadline.remaining()));
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

cluster::QuorumView LiveMembership::awaitView(cluster::QuorumView view,
                                              const std::function<bool(const cluster::QuorumView&)>& admitted,
                                              const std::string& what) {
  const std::string me = cluster::taskName(cluster::Role::kWorker, worker_);
  // The round may wait for a member still inside a collective, then for a silent one's timeout.
  const auto budget = options_.arrival_timeout + 2 * options_.heartbeat_timeout + std::chrono::seconds(5);
  const Deadline deadline = Deadline::after(budget);
  const auto call = callBudget();
  auto pause = std::chrono::milliseconds(5);
  while (!admitted(view) && !view.stopped) {
    if (deadline.expired()) {
      throw PeerError(fmt::format("{}: {} within {}; still awaited: {} worker(s)", me, what, formatDuration(budget),
                                  view.awaited.size()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
    // Beats, not arrivals: a worker the round left out must not come back as a joiner by polling.
    view = store_.quorumBeat(worker_, Deadline::after(call));
  }
  if (view.stopped) throw PeerError(fmt::format("the job stops: {}", *view.stopped));
  return view;
}

const cluster::Membership& LiveMembership::agree(int64_t steps_done, const std::string& why) {
  const std::string me = cluster::taskName(cluster::Role::kWorker, worker_);
  TANDEM_LOG_WARN("{}: {}; meeting the other workers at step {} (generation {})", me, why, steps_done,
                  current_.generation);
  const auto call = callBudget();
  const int64_t known = current_.generation;
  const cluster::QuorumView view = awaitView(
      store_.quorumArrive(worker_, known, steps_done, Deadline::after(call)),
      [known](const cluster::QuorumView& v) { return v.current.generation != known; },
      "the workers did not agree on the job's next members");
  if (!view.current.rankOf(worker_)) {
    std::string why_out = "not among them";
    for (const auto& d : view.current.departed) {
      if (d.worker == worker_) why_out = d.why;
    }
    throw PeerError(fmt::format("{} was left out of the job's generation {} ({}): it ends here",
                                me, view.current.generation, why_out));
  }
  current_ = view.current;
  return current_;
}

void LiveMembership::leave(int64_t steps_done) {
  const std::string me = cluster::taskName(cluster::Role::kWorker, worker_);
  const auto call = callBudget();
  store_.quorumLeave(worker_, Deadline::after(call));
  throw Departed(fmt::format("{} left the job after step {} as asked (SIGUSR2); the other {} go on without it", me,
                             steps_done, current_.size() - 1));
}

const cluster::Membership& LiveMembership::join() {
  const std::string me = cluster::taskName(cluster::Role::kWorker, worker_);
  const auto call = callBudget();
  // Only a generation after the one the job is at now can take this process
  // in: one that lists this worker already holds its predecessor.
  const int64_t before = store_.quorumBeat(worker_, Deadline::after(call)).current.generation;
  TANDEM_LOG_INFO("{}: joining the running job (generation {}); it takes this worker in at its next step boundary",
                  me, before);
  const cluster::QuorumView view = awaitView(
      store_.quorumArrive(worker_, before, /*step=*/-1, Deadline::after(call)),
      [before, this](const cluster::QuorumView& v) {
        return v.current.generation > before && v.current.rankOf(worker_).has_value();
      },
      "the running job did not take this worker in (it may be at --max-workers)");
  current_ = view.current;
  return current_;
}

void healFromSource(torch::nn::Module& model, torch::optim::Optimizer* optimizer, bool is_source,
                    const std::function<void(void* data, size_t bytes)>& broadcast) {
  broadcastModuleState(model, is_source, broadcast);
  if (optimizer == nullptr) return;
  // The optimizer's own serialisation: any optimizer, and a member that has
  // no state yet (a joiner) takes the source's.
  std::string bytes;
  if (is_source) {
    torch::serialize::OutputArchive archive;
    optimizer->save(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  uint64_t size = bytes.size();
  broadcast(&size, sizeof(size));
  bytes.resize(size);
  broadcast(bytes.data(), bytes.size());
  if (is_source) return;
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  optimizer->load(archive);
  for (const auto& p : model.parameters()) {
    if (!p.device().is_cpu()) {
      moveOptimizerState(*optimizer, p.device());
      break;
    }
  }
}

}  // namespace tandem::train
