#include "ps/request_handler.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/patient_wait.hpp"
#include "ps/messages.hpp"

namespace tandem::ps {

RequestHandler::RequestHandler(Options options)
    : options_(options), name_(fmt::format("ps {}", options.index)), store_(name_) {}

// --- replies ----------------------------------------------------------------

void RequestHandler::reply(Outbox& out, Reply r) {
  workers_.touch(r.routing, false);
  stats_.bytes_out += r.shared_bytes > 0 ? r.shared_bytes : r.payload.size();
  stats_.shared_bytes_out += r.shared_bytes;
  out.replies.push_back(std::move(r));
}

void RequestHandler::replyOk(Outbox& out, const std::string& routing, uint64_t request_id,
                             const std::vector<char>& payload) {
  Reply r{.routing = routing, .header = {.type = MessageType::kOk, .request_id = request_id}};
  if (!payload.empty()) r.payload = shared(copyBytes(payload.data(), payload.size()));
  reply(out, std::move(r));
}

void RequestHandler::replyError(Outbox& out, const std::string& routing, uint64_t request_id,
                                const std::string& reason) {
  reply(out, {.routing = routing,
              .header = {.type = MessageType::kError, .request_id = request_id},
              .payload = shared(copyBytes(reason))});
}

void RequestHandler::replies(Outbox& out, std::vector<Reply> rs) {
  for (auto& r : rs) reply(out, std::move(r));
}

// --- one request ------------------------------------------------------------

Outbox RequestHandler::handle(const Request& r, Clock::time_point now) {
  Outbox out;
  const std::string peer = workers_.nameOf(r.routing);
  try {
    dispatch(out, r, now);
    // A replacement this server copies to answers in its place if it dies.
    const MessageType t = r.header.type;
    if (t == msg::kClock || t == msg::kDone || t == msg::kLr || t == msg::kHello || t == msg::kHold ||
        t == msg::kRelease) {
      mirrorWorkers(out);
    }
  } catch (const InputError& e) {
    ++stats_.bad_frames;
    if (uint64_t more = 0; reject_log_.allow(peer, more)) {
      TANDEM_LOG_WARN("{}: rejected a frame from {}: {}{}", name_, peer, e.what(), reject_log_.suppressedText(more));
    }
    replyError(out, r.routing, r.header.request_id, e.what());
  } catch (const Refusal& refusal) {
    ++stats_.bad_frames;
    if (uint64_t more = 0; reject_log_.allow(peer, more)) {
      TANDEM_LOG_WARN("{}: refused a request from {}: {}{}", name_, peer, refusal.reason,
                      reject_log_.suppressedText(more));
    }
    replyError(out, r.routing, r.header.request_id, refusal.reason);
  } catch (const std::bad_alloc&) {
    ++stats_.bad_frames;
    replyError(out, r.routing, r.header.request_id, fmt::format("{} ran out of memory serving this request", name_));
  }
  return out;
}

Outbox RequestHandler::refuseFrame(const std::string& routing, uint64_t request_id, const std::string& reason) {
  Outbox out;
  const std::string peer = workers_.nameOf(routing);
  ++stats_.bad_frames;
  if (uint64_t more = 0; reject_log_.allow(peer, more)) {
    TANDEM_LOG_WARN("{}: rejected a frame from {}: {}{}", name_, peer, reason, reject_log_.suppressedText(more));
  }
  replyError(out, routing, request_id, reason);
  return out;
}

void RequestHandler::dispatch(Outbox& out, const Request& r, Clock::time_point now) {
  const MessageType type = r.header.type;
  if ((r.header.flags & net::kFlagInArena) != 0 && type != msg::kPush && type != msg::kPull) {
    throw Refusal{fmt::format("{} cannot name shared memory", kMessages.nameOf(type))};
  }
  switch (net::code(type)) {
    case net::code(msg::kHello): onHello(out, r); break;
    case net::code(msg::kInit): onInit(out, r); break;
    case net::code(msg::kSet): onSet(out, r); break;
    case net::code(msg::kPush): onPush(out, r); break;
    case net::code(msg::kForward): onForward(out, r); break;
    case net::code(msg::kReplicate): onReplicate(out, r); break;
    case net::code(msg::kCopy): onCopy(out, r); break;
    case net::code(msg::kMirror): onMirror(out, r); break;
    case net::code(msg::kPull):
    case net::code(msg::kState): onPull(out, r, now); break;
    case net::code(msg::kClock):
    case net::code(msg::kAwaitWorkers):
    case net::code(msg::kHold):
    case net::code(msg::kRelease): onStepClock(out, r); break;
    case net::code(msg::kDone): onDone(out, r); break;
    case net::code(msg::kLeave): onLeave(out, r, now); break;
    case net::code(msg::kLr): onLr(out, r); break;
    case net::code(msg::kAlive):
      workerOf(r.routing, type);  // heard from it: that is all
      replyOk(out, r.routing, r.header.request_id);
      break;
    case net::code(msg::kStatus):
      replyOk(out, r.routing, r.header.request_id, encode(ServerStatus{.initialised = initialised(), .ready = admission_.isReady()}));
      break;
    default: throw Refusal{fmt::format("{} is not a parameter-server request", kMessages.nameOf(type))};
  }
}

int RequestHandler::workerOf(const std::string& routing, MessageType type) {
  const int w = workers_.touch(routing, true);
  if (w < 0) throw Refusal{fmt::format("{} before ps-hello: say which worker you are first", kMessages.nameOf(type))};
  return w;
}

// --- pushes and pulls -------------------------------------------------------

ArenaDestination RequestHandler::namedArenaBytes(int w, const Request& r, size_t most) {
  const auto it = arenas_.find(w);
  if (it == arenas_.end()) {
    throw Refusal{fmt::format("worker {} sent a {} naming shared memory, but none of its is mapped here", w,
                              kMessages.nameOf(r.header.type))};
  }
  const std::string peer = fmt::format("worker {}", w);
  try {
    const net::ArenaRef ref = net::decodeArenaRef(r.payload.view(), peer);
    return {it->second, it->second->slice(ref, most, peer), ref};
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
}

void RequestHandler::onPush(Outbox& out, const Request& r) {
  const int w = workerOf(r.routing, r.header.type);
  const size_t index = store_.indexOf(r.header);
  const bool shared = (r.header.flags & net::kFlagInArena) != 0;
  OwnedBytes grad = r.payload;
  if (shared) {
    // The bytes stay in the worker's memory until the apply reads them: it
    // rewrites them only after this chunk's next pull is answered, which
    // waits for this push to be applied (with replicas, after this push is
    // acknowledged, which waits for its apply here). The arena's owner
    // keeps them mapped.
    const ArenaDestination named = namedArenaBytes(w, r, options_.max_payload_bytes);
    grad = {named.arena, named.bytes};
  }
  store_.requirePayload(index, r.header.type, grad.view(), config_->pushFormat());
  if (!admission_.isReady()) throw Refusal{"ps-push before every chunk was initialised"};
  // Async replicas: each push is acknowledged once both holders applied it.
  const bool held = config_->mode != Mode::PsSync && config_->replicas > 1;
  if (held && store_.hasPush(index, w, r.header.clock)) {
    // Forwarded here before its primary died, and sent again by the worker
    // since: it is in, once.
    ++stats_.repeated_pushes;
    replyOk(out, r.routing, r.header.request_id);
    return;
  }
  // A worker's own push: its chunks' other holder is gone, and this server orders their pushes now.
  fed_ = false;
  const size_t bytes = grad.size();
  AsyncPush how;
  if (held) {
    how.final = store_.arrivalTerms(index, w);
    how.ack = destination(forward_to_[index]) == nullptr ? HeldAck{r.routing, r.header.request_id}
                                                          : forward(out, r, index, w, *how.final, grad.view());
  }
  std::optional<ApplyJob> job = store_.push(w, index, r.header.clock, std::move(grad), timelineNow(), std::move(how));
  ++stats_.pushes;
  stats_.bytes_in += bytes;
  if (shared) stats_.shared_bytes_in += bytes;
  if (store_.holdsAcks(index)) {
    store_.holdAck(index, r.header.clock, r.routing, r.header.request_id);
  } else if (!held) {
    replyOk(out, r.routing, r.header.request_id);
  }
  if (job) out.applies.push_back(std::move(*job));
}

void RequestHandler::onPull(Outbox& out, const Request& r, Clock::time_point now) {
  const int w = workerOf(r.routing, r.header.type);
  const size_t index = store_.indexOf(r.header);
  const ChunkState& c = store_.at(index);
  const std::string what = kMessages.nameOf(r.header.type);
  std::vector<uint32_t> snapshot;
  std::optional<ArenaDestination> into;
  if ((r.header.flags & net::kFlagInArena) != 0) {  // a ps-pull: dispatch refuses the flag on ps-state
    into = namedArenaBytes(w, r, SIZE_MAX);
    const size_t bytes = wirePayloadBytes(c, config_ ? config_->wire : WireDtype::kFloat32);
    if (into->ref.bytes != bytes) {
      throw Refusal{fmt::format("worker {} offered {} bytes of shared memory for chunk {}'s {} bytes", w,
                                into->ref.bytes, c.key, bytes)};
    }
  } else if (r.header.type == msg::kState && !r.payload.empty() && config_ &&
             config_->mode != Mode::PsSync) {
    try {
      snapshot = decodeSnapshotPoint(r.payload.view(), workers_.size(), fmt::format("worker {}", w)).clocks;
    } catch (const InputError& e) {
      throw Refusal{e.what()};
    }
  } else if (!r.payload.empty()) {
    throw Refusal{what + " carries no payload"};
  }
  if (!admission_.isReady()) throw Refusal{what + " before every chunk was initialised"};
  ++stats_.pulls;
  replies(out, store_.pull(index,
                           {r.routing, r.header.request_id, 0, r.header.type == msg::kState, now, w, timelineNow(),
                            std::move(snapshot), std::move(into)},
                           r.header.clock));
}

std::string RequestHandler::describe(const ApplyJob& job) const {
  return config_->mode == Mode::PsSync
             ? fmt::format("{}: sync apply of chunk {} for step {}", name_, job.key, job.update)
             : fmt::format("{}: apply of chunk {} (update {})", name_, job.key, job.update);
}

Outbox RequestHandler::applied(ApplyJob& job, double seconds) {
  const size_t chunk = job.chunk;
  Outbox out;
  if (job.ack) acknowledgeApplied(out, *std::exchange(job.ack, std::nullopt));
  ++stats_.chunk_updates;
  stats_.apply_seconds += seconds;
  stats_.applied_bytes += static_cast<uint64_t>(store_.at(chunk).length) * sizeof(float);
  ChunkStore::Applied done = store_.applied(chunk);
  replies(out, std::move(done.replies));
  // Between two applies: the state a replacement is to be copied.
  if (const int to = std::exchange(copy_to_[chunk], -1); to >= 0) {
    copyChunk(out, chunk, to, done.next ? &*done.next : nullptr);
  }
  if (done.next) out.applies.push_back(std::move(*done.next));
  return out;
}

// --- the rest of a worker's requests ----------------------------------------

void RequestHandler::onStepClock(Outbox& out, const Request& r) {
  const MessageType type = r.header.type;
  const int w = workerOf(r.routing, type);
  if (!keepsClocks()) {
    throw Refusal{fmt::format("{} goes to ps 0{}, not {}", kMessages.nameOf(type),
                              config_ && config_->replicas > 1 ? " or ps 1" : "", name_)};
  }
  try {
    if (type == msg::kClock) {
      const StepReport report = decodeStepReport(r.payload.view(), fmt::format("worker {}", w));
      clocks_->report(w, r.header.clock, report, r.routing, r.header.request_id);
    } else if (type == msg::kAwaitWorkers) {
      clocks_->awaitOthers(w, r.routing, r.header.request_id);
    } else if (type == msg::kHold) {
      clocks_->hold(w, r.routing, r.header.request_id);
    } else {
      clocks_->unhold(w);
      replyOk(out, r.routing, r.header.request_id);
    }
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  answerClocks(out);
}

void RequestHandler::onDone(Outbox& out, const Request& r) {
  const int w = workerOf(r.routing, r.header.type);
  clocks_->finish(w);
  replyOk(out, r.routing, r.header.request_id);
  answerClocks(out);  // a finished worker no longer holds anyone back
}

void RequestHandler::onLeave(Outbox& out, const Request& r, Clock::time_point now) {
  const int w = workerOf(r.routing, r.header.type);
  replyOk(out, r.routing, r.header.request_id);
  if (!store_.depart(w)) return;
  TANDEM_LOG_WARN("{}: worker {} left to start again in place; this start's waits for it fail now", name_, w);
  expireClockWaits(out);
  replies(out, store_.expire(now));
}

void RequestHandler::onLr(Outbox& out, const Request& r) {
  const int w = workerOf(r.routing, r.header.type);
  LearningRate rate;
  try {
    rate = decodeLearningRate(r.payload.view(), fmt::format("worker {}", w));
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  store_.setLr(w, rate.lr);
  replyOk(out, r.routing, r.header.request_id);
}

// --- step clocks, timeouts, liveness ----------------------------------------

void RequestHandler::answerClocks(Outbox& out) {
  if (!clocks_) return;
  for (auto& a : clocks_->release()) {
    const std::vector<char> bytes = encode(a.agreement);
    reply(out, {.routing = a.routing,
                .header = {.type = msg::kAgreement, .clock = a.clock, .request_id = a.request_id},
                .payload = shared(copyBytes(bytes.data(), bytes.size()))});
  }
  if (auto hold = clocks_->takeHoldAnswer()) {
    replyOk(out, hold->routing, hold->request_id, encode(hold->point));
  }
}

void RequestHandler::expireClockWaits(Outbox& out) {
  if (!clocks_) return;
  auto lateText = [&](const StepClocks::Expired& e) {
    std::vector<std::string> late;
    for (int w : e.late) {
      late.push_back(fmt::format("worker {} (finished {} steps, last heard {:.1f}s ago)", w, clocks_->clockOf(w),
                                 secondsSince(workers_.at(w).last_seen)));
    }
    if (e.paused_by) {
      late.push_back(fmt::format("worker {}'s checkpoint, which pauses every other worker until its snapshot is "
                                 "fetched",
                                 *e.paused_by));
    }
    return fmt::format("{}", fmt::join(late, ", "));
  };
  const double timeout = config_->peer_timeout_s;
  if (store_.departed()) {
    for (auto& e : clocks_->expire(std::chrono::duration<double>(0))) {
      replyError(out, e.routing, e.request_id,
                 fmt::format("{}: step {} cannot end: {}", name_, e.clock, store_.departedText()));
    }
    return;
  }
  for (auto& e : clocks_->stalled(std::chrono::duration<double>(std::min(10.0, timeout / 2)))) {
    TANDEM_LOG_WARN("{}: step {} has waited {:.0f}s for {}", name_, e.clock, std::min(10.0, timeout / 2), lateText(e));
  }
  for (auto& e : clocks_->expire(std::chrono::duration<double>(timeout))) {
    replyError(out, e.routing, e.request_id,
               fmt::format("{}: step {} waited {} (--peer-timeout) for {}", name_, e.clock, config_->peerTimeoutText(),
                           lateText(e)));
  }
}

bool RequestHandler::everyoneGone(Outbox& out, Clock::time_point now) {
  if (!config_ || !liveness_) return false;
  std::vector<WorkerSighting> sightings(workers_.size());
  for (int w = 0; w < static_cast<int>(workers_.size()); ++w) {
    const WorkerState& ws = workers_.at(w);
    WorkerSighting& s = sightings[static_cast<size_t>(w)];
    s.last_seen = ws.last_seen;
    s.active = !clocks_->done(w) && !ws.lost;
    s.steps_here = heard_every_step_[static_cast<size_t>(w)] != 0;
    // Blocked on us (a step wait or a pull): its silence then is not death.
    s.waiting = s.active && (clocks_->isWaiting(w) || store_.holdsPullOf(ws.routing));
  }
  const LivenessVerdict verdict = liveness_->check(sightings, now);
  for (int w : verdict.lost) {
    workers_.at(w).lost = true;
    clocks_->lose(w);
    answerClocks(out);  // its granted step goes to the others; nobody awaits it
    TANDEM_LOG_WARN("{}: worker {} has been silent for {} (--peer-timeout) after {} step(s); giving up on it", name_,
                    w, config_->peerTimeoutText(), clocks_->clockOf(w));
  }
  if (!verdict.lost.empty()) mirrorWorkers(out);
  return verdict.everyone_gone;
}

RequestHandler::Tick RequestHandler::tick(Clock::time_point now) {
  Tick t;
  reportProgress(now);
  expireClockWaits(t.out);
  replies(t.out, store_.expire(now));
  t.everyone_gone = everyoneGone(t.out, now);
  return t;
}

void RequestHandler::reportProgress(Clock::time_point now) {
  if (!config_ || now - last_report_ < std::chrono::seconds(30)) return;
  const double seconds = std::chrono::duration<double>(now - last_report_).count();
  last_report_ = now;
  std::string progress;
  if (keepsClocks()) progress = fmt::format(", slowest worker has finished {} step(s)", clocks_->slowest());
  progress += describeStaleness(stalenessSummary());
  TANDEM_LOG_INFO("{}: {} chunk updates, {:.1f} GB in, {:.1f} GB out, {:.1f}s applying in the last {:.0f}s{}", name_,
                  stats_.chunk_updates, stats_.bytes_in / 1e9, stats_.bytes_out / 1e9,
                  stats_.apply_seconds - stats_.reported_apply_seconds, seconds, progress);
  stats_.reported_apply_seconds = stats_.apply_seconds;
}

nlohmann::json RequestHandler::momentumCorrection() const {
  optim::OptimizerSettings settings = config_->optimizer;
  const double given = momentumSetting(settings);
  const double staleness = store_.pushStaleness().mean;
  return {{"setting", momentumSettingName(settings)},
          {"given", given},
          {"applied", correctedMomentum(given, staleness)},
          {"mean_staleness", staleness}};
}

nlohmann::json RequestHandler::stalenessSummary() const {
  nlohmann::json j = nlohmann::json::object();
  if (config_ && config_->staleness_lr) j["push_staleness"] = toJson(store_.pushStaleness());
  if (config_ && config_->momentum_correction) j["momentum_correction"] = momentumCorrection();
  return j;
}

nlohmann::json RequestHandler::summary(double wall_seconds) const {
  const bool ps0 = keepsClocks() && clocks_;
  nlohmann::json j = {
      {"role", "ps"}, {"index", options_.index},
      {"mode", config_ ? std::string(modeName(config_->mode)) : "uninitialised"},
      {"workers", workers_.size()}, {"chunks", store_.chunks().size()}, {"floats", totalFloats(store_.chunks())},
      {"apply_threads", options_.apply_threads},
      // Only the clock keepers (ps 0; ps 1 too with --ps-replicas 2) hold the step clocks.
      {"global_step", ps0 ? nlohmann::json(clocks_->globalStep()) : nlohmann::json(nullptr)},
      {"max_staleness", ps0 ? nlohmann::json(clocks_->maxStaleness()) : nlohmann::json(nullptr)},
      {"lost_workers", workers_.lost()}, {"wall_seconds", wall_seconds}};
  // ps 0: each worker index's steps; with replacements these add up to the
  // job's updates (async) however often a worker was replaced.
  if (ps0) j["steps_by_worker"] = clocks_->stepsByWorker();
  if (config_ && config_->delay_compensation > 0) {
    // Its memory: each worker's last pulled values and (adaptive) a mean square, per chunk.
    uint64_t floats = 0;
    for (const auto& c : store_.chunks()) {
      floats += c.mean_square.size();
      for (const auto& pulled : c.pulled_by) floats += pulled->size();
    }
    j["delay_compensation"] = {{"lambda0", config_->delay_compensation},
                               {"form", config_->delay_form},
                               {"bytes", floats * sizeof(float)}};
  }
  if (config_) j["staleness_lr"] = config_->staleness_lr;
  j.update(stalenessSummary());
  if (config_ && config_->replicas > 1) j["chunk_digests"] = chunkDigests();
  j.update(stats_.toJson(store_.chunks().size()));
  return j;
}

}  // namespace tandem::ps
