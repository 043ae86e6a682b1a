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

void ParameterServer::Impl::startSyncApply(size_t index) {
  ChunkState& c = chunks[index];
  c.busy = true;
  auto grads = std::make_shared<std::vector<zmq::message_t>>();
  for (auto& g : c.step_grads) {
    if (g) grads->push_back(*std::exchange(g, std::nullopt));
  }
  c.step_grad_count = 0;
  const uint64_t step = c.applied;
  const double lr = lrOf(0, step);  // the chief's rate, as its schedule is the table's
  auto arrived = std::make_shared<std::vector<int64_t>>(c.step_grad_us);
  pool->submit(fmt::format("{}: sync apply of chunk {} for step {}", name, c.key, step), [this, index, grads, step, lr,
                                                                                           arrived] {
    Stopwatch watch;
    {
      // The span closes before finishJob wakes the pulls the apply releases.
      ChunkState& chunk = chunks[index];
      TimelineApply span(*this, chunk.key, step);
      for (size_t w = 0; w < arrived->size(); ++w) span.queued(static_cast<int>(w), (*arrived)[w]);
      if (options.apply_fault) options.apply_fault(chunk.key, step);
      std::vector<float> scratch;
      // Each worker pre-scaled its gradient by 1/workers: the sum is the mean.
      applyUpdate(chunk, sumGradients(*grads, static_cast<size_t>(chunk.length), config->wire, scratch), step, lr,
                  *config);
    }
    finishJob(index, watch);
  });
}

void ParameterServer::Impl::startAsyncApply(size_t index) {
  ChunkState& c = chunks[index];
  if (stopping || c.busy || c.queue.empty()) return;
  c.busy = true;
  auto grad = std::make_shared<zmq::message_t>(std::move(c.queue.front().grad));
  const double lr = c.queue.front().lr;
  const int worker = c.queue.front().worker;
  const int64_t received_us = c.queue.front().received_us;
  c.queue.pop_front();
  const uint64_t update = c.applied;
  pool->submit(fmt::format("{}: apply of chunk {} (update {})", name, c.key, update),
               [this, index, grad, update, lr, worker, received_us] {
                 Stopwatch watch;
                 {
                   TimelineApply span(*this, chunks[index].key, update);
                   span.queued(worker, received_us);
                   if (options.apply_fault) options.apply_fault(chunks[index].key, update);
                   std::vector<float> scratch;
                   ChunkState& chunk = chunks[index];
                   applyUpdate(chunk, gradientOf(*grad, static_cast<size_t>(chunk.length), config->wire, scratch),
                               update, lr, *config);
                 }
                 finishJob(index, watch);
               });
}

void ParameterServer::Impl::drainCompletions() {
  std::vector<Completion> done;
  {
    std::lock_guard lock(completions_mutex);
    done.swap(completions);
  }
  for (const auto& d : done) {
    ChunkState& c = chunks[d.chunk];
    c.busy = false;
    ++c.applied;
    ++stats.chunk_updates;
    stats.apply_seconds += d.seconds;
    stats.applied_bytes += static_cast<uint64_t>(c.length) * sizeof(float);
    answerPulls(c);
    if (config->mode != TrainingMode::kPsSync) startAsyncApply(d.chunk);
  }
}

void ParameterServer::Impl::startOver() {
  stopping = true;  // no new async applies while the running ones finish
  while (std::any_of(chunks.begin(), chunks.end(), [](const ChunkState& c) { return c.busy; })) {
    pool->rethrowFailure();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    drainCompletions();
  }
  stopping = false;
  retired_chunks.push_back(std::move(chunks));
  chunks.clear();
  chunk_index.clear();
  config.reset();
  ready = false;
  clocks.reset();
  worker_lr.clear();
  stats = ServerStats{.started_over = stats.started_over + 1};
}

void ParameterServer::Impl::answerPulls(ChunkState& c) {
  for (const auto& p : takeReadyPulls(c)) {
    if (options.timeline != nullptr && p.received_us != 0) {
      options.timeline->span(fmt::format("pull chunk {} for worker {}", c.key, p.worker), kPullLane, p.received_us,
                             obs::Timeline::nowUs(), {{"version", c.applied}});
    }
    net::FrameHeader header{.type = msg::kValues, .clock = static_cast<uint32_t>(c.applied),
                            .request_id = p.request_id, .key_begin = c.key, .key_end = c.key + 1};
    if (p.into) {
      header.flags = net::kFlagInArena;
      reply(p.routing, header, pullIntoArena(c, *p.into, config->wire), p.into->bytes.size());
    } else {
      reply(p.routing, header, pullPayload(c, p, config->mode == TrainingMode::kPsSync, config->wire));
    }
  }
}

std::string ParameterServer::Impl::timeoutText() const {
  return formatDuration(std::chrono::milliseconds(static_cast<int64_t>(config->peer_timeout_s * 1000)));
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
  if (departed) {
    for (auto& e : clocks->expire(std::chrono::duration<double>(0))) {
      replyError(e.routing, e.request_id, fmt::format("{}: step {} cannot end: {}", name, e.clock, departedText()));
    }
    return;
  }
  for (auto& e : clocks->stalled(std::chrono::duration<double>(std::min(10.0, timeout / 2)))) {
    TANDEM_LOG_WARN("{}: step {} has waited {:.0f}s for {}", name, e.clock, std::min(10.0, timeout / 2), lateText(e));
  }
  for (auto& e : clocks->expire(std::chrono::duration<double>(timeout))) {
    replyError(e.routing, e.request_id,
               fmt::format("{}: step {} waited {} (--peer-timeout) for {}", name, e.clock, timeoutText(), lateText(e)));
  }
}

void ParameterServer::Impl::expirePulls() {
  if (!config) return;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config->peer_timeout_s));
  const auto now = Clock::now();
  for (auto& c : chunks) {
    const auto expired = takeExpiredPulls(c, departed ? Clock::duration::zero() : timeout, now);
    if (expired.empty()) continue;
    std::vector<std::string> missing;
    for (int w : missingPushers(c)) missing.push_back(fmt::format("worker {}", w));
    const std::string who = config->mode == TrainingMode::kPsSync && !missing.empty()
                                ? fmt::format("; no push of step {} from {}", c.applied, fmt::join(missing, ", "))
                                : "";
    for (const auto& p : expired) {
      replyError(p.routing, p.request_id,
                 departed ? fmt::format("{}: pull of chunk {} cannot be answered: {}", name, c.key, departedText())
                          : fmt::format("{}: pull of chunk {} waited {} (--peer-timeout){}", name, c.key,
                                        timeoutText(), who));
    }
  }
}

std::string ParameterServer::Impl::departedText() const {
  return fmt::format("worker {} left to start again in place (--restart-wait; its log says why)", *departed);
}

bool ParameterServer::Impl::isWaiting(int w) const {
  if (clocks->isWaiting(w)) return true;
  const std::string& routing = workers.at(w).routing;
  for (const auto& c : chunks) {
    for (const auto& p : c.pulls) {
      if (p.routing == routing) return true;
    }
  }
  return false;
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
                    w, timeoutText(), clocks->clockOf(w));
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
      {"workers", workers.size()}, {"chunks", chunks.size()}, {"floats", totalFloats(chunks)},
      {"apply_threads", apply_threads},
      // Only ps 0 keeps the step clocks.
      {"global_step", options.index == 0 && clocks ? nlohmann::json(clocks->globalStep()) : nlohmann::json(nullptr)},
      {"max_staleness", options.index == 0 && clocks ? nlohmann::json(clocks->maxStaleness()) : nlohmann::json(nullptr)},
      {"lost_workers", workers.lost()}, {"wall_seconds", wall_seconds}};
  // ps 0: each worker index's steps; with replacements these add up to the
  // job's updates (async) however often a worker was replaced.
  if (options.index == 0 && clocks) j["steps_by_worker"] = clocks->stepsByWorker();
  j.update(stats.toJson(chunks.size()));
  return j;
}

}  // namespace tandem::ps
