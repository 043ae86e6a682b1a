// The parameter server's second half: applying updates on the pool,
// answering pulls and step clocks, and the timeouts that name late workers.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <thread>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "ps/messages.hpp"
#include "ps/server_impl.hpp"

namespace tandem::ps {

using MessageType = net::MessageType;

ParameterServer::Impl::TimelineApply::TimelineApply(Impl& server, uint64_t key, uint64_t update)
    : timeline_(server.options.timeline), key_(key), update_(update), start_us_(server.timelineNow()) {}

void ParameterServer::Impl::TimelineApply::queued(int worker, int64_t received_us) {
  if (timeline_ == nullptr || received_us == 0) return;
  timeline_->span(fmt::format("queued: chunk {} from worker {}", key_, worker), kRequestLane, received_us, start_us_,
                  {{"update", update_}});
}

ParameterServer::Impl::TimelineApply::~TimelineApply() {
  if (timeline_ == nullptr) return;
  timeline_->span(fmt::format("apply chunk {}", key_), kApplyLane, start_us_, obs::Timeline::nowUs(),
                  {{"update", update_}});
}

void ParameterServer::Impl::finishJob(size_t index, Stopwatch& watch) {
  const double seconds = watch.elapsed();
  {
    std::lock_guard lock(completions_mutex);
    completions.push_back({index, seconds});
  }
  wake();
}

void ParameterServer::Impl::submit(std::optional<ApplyJob> job) {
  if (!job) return;
  const uint64_t key = store.at(job->chunk).key;
  const std::string what = config->mode == TrainingMode::kPsSync
                               ? fmt::format("{}: sync apply of chunk {} for step {}", name, key, job->update)
                               : fmt::format("{}: apply of chunk {} (update {})", name, key, job->update);
  pool->submit(what, [this, key, job = std::make_shared<ApplyJob>(std::move(*job))] {
    Stopwatch watch;
    {
      // The span closes before finishJob wakes the pulls the apply releases.
      TimelineApply span(*this, key, job->update);
      for (const auto& [worker, received_us] : job->arrivals) span.queued(worker, received_us);
      if (options.apply_fault) options.apply_fault(key, job->update);
      store.apply(*job);
    }
    finishJob(job->chunk, watch);
  });
}

void ParameterServer::Impl::drainCompletions() {
  std::vector<Completion> done;
  {
    std::lock_guard lock(completions_mutex);
    done.swap(completions);
  }
  for (const auto& d : done) {
    ++stats.chunk_updates;
    stats.apply_seconds += d.seconds;
    stats.applied_bytes += static_cast<uint64_t>(store.at(d.chunk).length) * sizeof(float);
    ChunkStore::Applied applied = store.applied(d.chunk);
    send(std::move(applied.replies));
    submit(std::move(applied.next));
  }
}

void ParameterServer::Impl::send(std::vector<Reply> replies) {
  for (auto& r : replies) {
    if (options.timeline != nullptr && r.received_us != 0) {
      options.timeline->span(fmt::format("pull chunk {} for worker {}", r.header.key_begin, r.worker), kPullLane,
                             r.received_us, obs::Timeline::nowUs(), {{"version", r.header.clock}});
    }
    reply(r.routing, r.header, net::sharedPayload(std::move(r.payload)), r.shared_bytes);
  }
}

void ParameterServer::Impl::startOver() {
  store.stopApplying(true);  // no new async applies while the running ones finish
  while (store.busy()) {
    pool->rethrowFailure();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    drainCompletions();
  }
  store.stopApplying(false);
  config.reset();
  admission.forget();
  clocks.reset();
  stats = ServerStats{.started_over = stats.started_over + 1};
}

void ParameterServer::Impl::answerClocks() {
  if (!clocks) return;
  for (auto& a : clocks->release()) {
    reply(a.routing, {.type = msg::kAgreement, .clock = a.clock, .request_id = a.request_id},
          net::copyPayload(encode(a.agreement)));
  }
  if (auto hold = clocks->takeHoldAnswer()) {
    reply(hold->routing, {.type = MessageType::kOk, .request_id = hold->request_id},
          net::copyPayload(encode(hold->point)));
  }
}

void ParameterServer::Impl::expireClockWaits() {
  if (!clocks) return;
  auto lateText = [&](const StepClocks::Expired& e) {
    std::vector<std::string> late;
    for (int w : e.late) {
      late.push_back(fmt::format("worker {} (finished {} steps, last heard {:.1f}s ago)", w, clocks->clockOf(w),
                                 secondsSince(workers.at(w).last_seen)));
    }
    return fmt::format("{}", fmt::join(late, ", "));
  };
  const double timeout = config->peer_timeout_s;
  if (store.departed()) {
    for (auto& e : clocks->expire(std::chrono::duration<double>(0))) {
      replyError(e.routing, e.request_id,
                 fmt::format("{}: step {} cannot end: {}", name, e.clock, store.departedText()));
    }
    return;
  }
  for (auto& e : clocks->stalled(std::chrono::duration<double>(std::min(10.0, timeout / 2)))) {
    TANDEM_LOG_WARN("{}: step {} has waited {:.0f}s for {}", name, e.clock, std::min(10.0, timeout / 2), lateText(e));
  }
  for (auto& e : clocks->expire(std::chrono::duration<double>(timeout))) {
    replyError(e.routing, e.request_id,
               fmt::format("{}: step {} waited {} (--peer-timeout) for {}", name, e.clock, config->peerTimeoutText(), lateText(e)));
  }
}

bool ParameterServer::Impl::isWaiting(int w) const {
  return clocks->isWaiting(w) || store.holdsPullOf(workers.at(w).routing);
}

bool ParameterServer::Impl::everyoneGone() {
  if (!config || !liveness) return false;
  std::vector<WorkerSighting> sightings(workers.size());
  for (int w = 0; w < static_cast<int>(workers.size()); ++w) {
    const WorkerState& ws = workers.at(w);
    WorkerSighting& s = sightings[static_cast<size_t>(w)];
    s.last_seen = ws.last_seen;
    s.active = !clocks->done(w) && !ws.lost;
    s.steps_here = heard_every_step[static_cast<size_t>(w)] != 0;
    s.waiting = s.active && isWaiting(w);
  }
  const LivenessVerdict verdict = liveness->check(sightings, Clock::now());
  for (int w : verdict.lost) {
    workers.at(w).lost = true;
    clocks->lose(w);
    answerClocks();  // its granted step goes to the others; nobody awaits it
    TANDEM_LOG_WARN("{}: worker {} has been silent for {} (--peer-timeout) after {} step(s); giving up on it", name,
                    w, config->peerTimeoutText(), clocks->clockOf(w));
  }
  return verdict.everyone_gone;
}

void ParameterServer::Impl::reportProgress(Clock::time_point& last, std::chrono::seconds interval) {
  if (!config || Clock::now() - last < interval) return;
  const double seconds = secondsSince(last);
  last = Clock::now();
  std::string progress;
  if (options.index == 0) progress = fmt::format(", slowest worker has finished {} step(s)", clocks->slowest());
  TANDEM_LOG_INFO("{}: {} chunk updates, {:.1f} GB in, {:.1f} GB out, {:.1f}s applying in the last {:.0f}s{}", name,
                  stats.chunk_updates, stats.bytes_in / 1e9, stats.bytes_out / 1e9,
                  stats.apply_seconds - stats.reported_apply_seconds, seconds, progress);
  stats.reported_apply_seconds = stats.apply_seconds;
}

nlohmann::json ParameterServer::Impl::summary(double wall_seconds) const {
  nlohmann::json j = {
      {"role", "ps"}, {"index", options.index}, {"mode", config ? std::string(modeName(config->mode)) : "uninitialised"},
      {"workers", workers.size()}, {"chunks", store.chunks().size()}, {"floats", totalFloats(store.chunks())},
      {"apply_threads", apply_threads},
      // Only ps 0 keeps the step clocks.
      {"global_step", options.index == 0 && clocks ? nlohmann::json(clocks->globalStep()) : nlohmann::json(nullptr)},
      {"max_staleness", options.index == 0 && clocks ? nlohmann::json(clocks->maxStaleness()) : nlohmann::json(nullptr)},
      {"lost_workers", workers.lost()}, {"wall_seconds", wall_seconds}};
  // ps 0: each worker index's steps; with replacements these add up to the
  // job's updates (async) however often a worker was replaced.
  if (options.index == 0 && clocks) j["steps_by_worker"] = clocks->stepsByWorker();
  if (config && config->delay_compensation > 0) {
    // Its memory: each worker's last pulled values and (adaptive) a mean square, per chunk.
    uint64_t floats = 0;
    for (const auto& c : store.chunks()) {
      floats += c.mean_square.size();
      for (const auto& pulled : c.pulled_by) floats += pulled->size();
    }
    j["delay_compensation"] = {{"lambda0", config->delay_compensation},
                               {"form", config->delay_form},
                               {"bytes", floats * sizeof(float)}};
  }
  if (config) j["staleness_lr"] = config->staleness_lr;
  j.update(stats.toJson(store.chunks().size()));
  return j;
}

}  // namespace tandem::ps
