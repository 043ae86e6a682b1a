// RequestHandler's side of a job's joining: the chief's init and the
// chunks it sets (a fresh start, a resume, a replacement's set-up), and each
// worker's hello: admission, a replacement taking its predecessor's place
// (async and SSP: its clock; sync: a step boundary), and the shared memory
// a same-host worker maps.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "ps/messages.hpp"
#include "ps/request_handler.hpp"

namespace tandem::ps {

void RequestHandler::onInit(Outbox& out, const Request& r) {
  ServerConfig c;
  try {
    c = decodeServerInit(r.payload.text(), options_.max_payload_bytes, "chief");
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  // Checked before anything changes: a refused init leaves the server as it was.
  ChunkStore::validate(c);
  if (admission_.mayInit(c, name_)) {
    // The chief started again after a failure. Its previous start's
    // applies touch chunk memory: they finish before anything is forgotten.
    if (store_.busy()) {
      store_.stopApplying(true);  // no new async applies while the running ones finish
      out.retry_when_idle = true;
      return;
    }
    // Forget that start: its workers, clocks and held requests (their
    // senders are gone); its chunks are retired by the reset below.
    store_.stopApplying(false);
    config_.reset();
    admission_.forget();
    clocks_.reset();
    stats_ = ServerStats{.started_over = stats_.started_over + 1};
    TANDEM_LOG_WARN("{}: the chief started again after a failure ({:016x} replaces {:016x}); starting over from its "
                    "step {}",
                    name_, c.generation, c.replaces, c.start_step);
  }
  store_.reset(c);
  forwarding_.reset(c.forward_to.empty() ? std::nullopt
                                         : std::optional(Destination{.endpoint = c.forward_to, .name = c.forward_name}));
  forward_to_.clear();
  for (const auto& chunk : store_.chunks()) forward_to_.push_back(!chunk.backup && !c.forward_to.empty() ? 0 : -1);
  copy_to_.assign(store_.chunks().size(), -1);
  heard_every_step_.assign(static_cast<size_t>(c.workers), options_.index < c.replicas ? 1 : 0);
  for (const auto& chunk : store_.chunks()) {
    for (int w : chunk.pushers) heard_every_step_[static_cast<size_t>(w)] = 1;
  }
  liveness_.emplace(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c.peer_timeout_s)));
  workers_.reset(c.workers);
  clocks_.emplace(c.mode, c.staleness, c.workers, c.start_step, c.total_steps);
  const int64_t floats = totalFloats(store_.chunks());
  TANDEM_LOG_INFO("{}: {} mode, {} worker(s), {} chunk(s), {:.1f} MB, optimizer {}, {} apply thread(s), {} on the "
                  "wire{}{}",
                  name_, modeName(c.mode), c.workers, store_.chunks().size(), static_cast<double>(floats) * 4 / 1e6,
                  c.optimizer.name, options_.apply_threads, wireDtypeName(c.wire),
                  c.push_bits ? fmt::format(" (pushes {})", c.pushFormat().name()) : "",
                  c.start_step > 0 ? fmt::format("; from step {}", c.start_step) : "");
  admission_.initialised(c);
  config_ = std::move(c);
  replyOk(out, r.routing, r.header.request_id);
  checkReady(out);
}

void RequestHandler::onSet(Outbox& out, const Request& r) {
  const size_t index = store_.indexOf(r.header);
  if (admission_.isReady()) throw Refusal{fmt::format("ps-set of chunk {} after training started", store_.at(index).key)};
  store_.set(index, r.header.clock, r.payload.view());
  replyOk(out, r.routing, r.header.request_id);
  checkReady(out);
}

void RequestHandler::checkReady(Outbox& out) {
  if (admission_.isReady() || !store_.everyChunkSet()) return;
  for (auto& held : admission_.ready()) {
    try {
      registerWorker(out, held);
    } catch (const Refusal& refusal) {
      ++stats_.bad_frames;
      TANDEM_LOG_WARN("{}: refused a hello: {}", name_, refusal.reason);
      replyError(out, held.routing, held.request_id, refusal.reason);
    }
  }
}

void RequestHandler::onHello(Outbox& out, const Request& r) {
  Admission::HeldHello held{r.routing, r.header.request_id, {}, r.same_host};
  try {
    held.hello = decodeHello(r.payload.view(), "a client");
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  // Workers may arrive before the chief has initialised this server, or
  // before the init of the start they joined (the chief's next start after
  // a failure): they are answered once it has arrived.
  if (admission_.admitNow(held)) registerWorker(out, held);
}

void RequestHandler::registerWorker(Outbox& out, const Admission::HeldHello& held) {
  const Hello& h = held.hello;
  admission_.check(h);
  const bool sync_join = h.sync_join != Hello::kNotJoining;
  if (sync_join && config_->mode != Mode::PsSync) {
    throw Refusal{fmt::format("worker {} joins as a sync replacement, but this is a {} job", h.worker,
                              modeName(config_->mode))};
  }
  bool replaced = false;
  if (std::string why = workers_.bind(held.routing, h.worker, admission_.elastic() || sync_join, &replaced);
      !why.empty()) {
    throw admission_.bindRefusal(std::move(why));
  }
  HelloAnswer answer;
  if (sync_join) {
    joinSync(out, h, answer);
  } else if (keepsClocks()) {
    const bool steps_left = !replaced || clocks_->rejoin(static_cast<int>(h.worker));
    answer = {clocks_->clockOf(static_cast<int>(h.worker)), config_->start_step};
    answer.finished = !steps_left;
  }
  answer.arena_mapped = mapArena(static_cast<int>(h.worker), h, held.same_host);
  answer.fed = fed_;
  if (replaced && !sync_join) {
    ++stats_.rejoins;
    TANDEM_LOG_WARN("{}: worker {} rejoined from a new connection (a replacement){}; its old connection is dropped",
                    name_, h.worker, keepsClocks() ? fmt::format(" at its step {}", answer.clock) : std::string());
  }
  replyOk(out, held.routing, held.request_id, encode(answer));
  if (replaced && keepsClocks()) answerClocks(out);
}

void RequestHandler::joinSync(Outbox& out, const Hello& h, HelloAnswer& answer) {
  const int w = static_cast<int>(h.worker);
  uint32_t step = h.sync_join;  // the first step it pushes
  if (step == Hello::kAskJoinStep && !keepsClocks()) {
    throw Refusal{fmt::format("worker {} asked {} where it joins; only a step-clock keeper knows", w, name_)};
  }
  for (auto& job : store_.leave(w)) out.applies.push_back(std::move(job));
  if (step == Hello::kAskJoinStep) {
    step = clocks_->joinSync(w) + 1;
  } else if (keepsClocks()) {
    clocks_->joinSync(w, step - 1);
  }
  store_.joinAt(w, step);
  answer.clock = step - 1;
  answer.start_step = config_->start_step;
  ++stats_.rejoins;
  TANDEM_LOG_WARN("{}: worker {} joined the running sync job (a replacement); it pushes from step {} on", name_, w,
                  step);
  if (keepsClocks()) answerClocks(out);
}

bool RequestHandler::mapArena(int worker, const Hello& h, bool same_host) {
  arenas_.erase(worker);  // a replacement's hello replaces its predecessor's
  // Only over the same-host socket: a remote member's handle would name a
  // process here that is not its own.
  if (!h.arena || !same_host) return false;
  try {
    arenas_[worker] = net::SharedArena::open(*h.arena, fmt::format("worker {}", worker));
    return true;
  } catch (const InputError& e) {
    TANDEM_LOG_WARN("{}: worker {} sends its bytes through the socket: {}", name_, worker, e.what());
    return false;
  }
}

}  // namespace tandem::ps
