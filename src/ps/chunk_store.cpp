#include "ps/chunk_store.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/patient_wait.hpp"
#include "ps/delay_compensation.hpp"
#include "ps/messages.hpp"

namespace tandem::ps {

namespace {

std::unordered_map<uint64_t, size_t> indexChunks(const ServerConfig& config) {
  std::unordered_map<uint64_t, size_t> index;
  for (const auto& r : config.chunks) {
    if (!index.emplace(r.key, index.size()).second) throw Refusal{fmt::format("ps-init lists chunk {} twice", r.key)};
  }
  for (uint64_t key : config.backup_chunks) {
    if (!index.contains(key)) throw Refusal{fmt::format("ps-init names chunk {} a backup but does not list it", key)};
  }
  return index;
}

}  // namespace

void ChunkStore::validate(const ServerConfig& config) { indexChunks(config); }

void ChunkStore::reset(const ServerConfig& config) {
  // Checked before anything changes: a refused init leaves the store as it was.
  std::unordered_map<uint64_t, size_t> index = indexChunks(config);
  if (!chunks_.empty()) retired_.push_back(std::move(chunks_));
  chunks_.clear();
  index_ = std::move(index);
  for (const auto& r : config.chunks) {
    initChunk(chunks_.emplace_back(), r, config.optimizer, config.workers, pushersOf(config, r.key));
    chunks_.back().pushed_through.assign(static_cast<size_t>(config.workers), config.start_step);
  }
  for (uint64_t key : config.backup_chunks) chunks_[index_.at(key)].backup = true;
  worker_lr_.assign(static_cast<size_t>(config.workers), std::nullopt);
  departed_.reset();
  joins_at_.assign(static_cast<size_t>(config.workers), 0);
  config_ = config;
}

size_t ChunkStore::indexOf(const net::FrameHeader& h) const {
  if (!config_) throw Refusal{fmt::format("{} has not been initialised by the chief yet", name_)};
  if (h.key_end != h.key_begin + 1) {
    throw Refusal{fmt::format("{} covers keys [{}, {}); requests name exactly one chunk", kMessages.nameOf(h.type),
                              h.key_begin, h.key_end)};
  }
  const auto it = index_.find(h.key_begin);
  if (it == index_.end()) throw Refusal{fmt::format("unknown key {}: {} does not hold that chunk", h.key_begin, name_)};
  return it->second;
}

void ChunkStore::requirePayload(size_t index, net::MessageType type, std::span<const std::byte> payload,
                                const PushFormat& format) const {
  const ChunkState& c = chunks_[index];
  const size_t expected = format.bytes(static_cast<size_t>(c.length));
  if (payload.size() != expected) {
    throw Refusal{fmt::format("{} of chunk {} carries {} bytes; the chunk holds {} values ({} bytes as {})",
                              kMessages.nameOf(type), c.key, payload.size(), c.length, expected, format.name())};
  }
}

void ChunkStore::set(size_t index, uint32_t clock, std::span<const std::byte> payload) {
  ChunkState& c = chunks_[index];
  if (!loadChunk(c, payload)) requirePayload(index, msg::kSet, payload, PushFormat{});
  refreshWireCopy(c, config_->wire);
  c.applied = clock;
  c.received = clock;
  c.initialized = true;
  // Every worker starts from these values: the chief has them, the others pull them.
  if (compensating()) {
    c.pulled_by.clear();
    for (int w = 0; w < config_->workers; ++w) c.pulled_by.push_back(std::make_shared<std::vector<float>>(c.param));
    if (config_->delay_form == DelayForm::kAdaptive) c.mean_square.assign(static_cast<size_t>(c.length), 0.0f);
  }
  if (config_->staleness_lr) c.pulled_at.assign(static_cast<size_t>(config_->workers), c.applied);
}

void ChunkStore::copyIn(size_t index, const CopyHead& head, std::span<const std::byte> state) {
  ChunkState& c = chunks_[index];
  if (state.size() != stateBytes(c)) {
    throw Refusal{fmt::format("{}: ps-copy of chunk {} carries {} bytes; its values and slots are {}", name_, c.key,
                              state.size(), stateBytes(c))};
  }
  set(index, 0, state);
  c.applied = head.applied;
  c.received = head.applied;
  c.pushed_through = head.pushed_through;
  if (config_->staleness_lr) {
    if (head.pulled_at.empty()) {
      c.pulled_at.assign(static_cast<size_t>(config_->workers), head.applied);
    } else {
      c.pulled_at = head.pulled_at;
    }
  }
  c.copied = true;
}

CopyHead ChunkStore::copyHead(size_t index) const {
  const ChunkState& c = chunks_[index];
  return {.applied = c.applied, .pushed_through = c.pushed_through, .pulled_at = c.pulled_at};
}

bool ChunkStore::everyChunkSet() const {
  return config_ && std::all_of(chunks_.begin(), chunks_.end(), [](const ChunkState& c) { return c.initialized; });
}

void ChunkStore::setLr(int worker, double lr) { worker_lr_.at(static_cast<size_t>(worker)) = lr; }

double ChunkStore::lrOf(int worker, uint64_t lr_step) const {
  const auto& sent = worker_lr_[static_cast<size_t>(worker)];
  return sent ? *sent : config_->lrAt(lr_step);
}

std::optional<ApplyJob> ChunkStore::push(int w, size_t index, uint32_t clock, OwnedBytes grad,
                                         int64_t received_us, AsyncPush how) {
  ChunkState& c = chunks_[index];
  if (sync()) {
    const bool ahead = c.backup && clock == c.applied + 1;
    if (clock != c.applied && !ahead) {
      throw Refusal{fmt::format("worker {} pushed chunk {} for step {} but the chunk is at step {}", w, c.key, clock,
                                c.applied)};
    }
    if (!std::binary_search(c.pushers.begin(), c.pushers.end(), w)) {
      throw Refusal{fmt::format("worker {} pushed chunk {}, which its host's group pushes through worker(s) {}", w,
                                c.key, fmt::join(c.pushers, ", "))};
    }
    if (!awaits(w, clock)) {
      const uint32_t from = joins_at_[static_cast<size_t>(w)];
      throw Refusal{from == kLeft ? fmt::format("worker {} pushed chunk {} for step {}, but it left the job (it died, "
                                                "and its replacement has not joined)", w, c.key, clock)
                                  : fmt::format("worker {} pushed chunk {} for step {}, but it joined to push from "
                                                "step {} on", w, c.key, clock, from)};
    }
    auto& slot = (ahead ? c.ahead_grads : c.step_grads)[static_cast<size_t>(w)];
    if (slot) throw Refusal{fmt::format("worker {} pushed chunk {} twice for step {}", w, c.key, clock)};
    slot = std::move(grad);
    if (ahead) {
      c.ahead_grad_us[static_cast<size_t>(w)] = received_us;
      ++c.ahead_grad_count;
      return std::nullopt;  // kept until this step's apply ends
    }
    c.step_grad_us[static_cast<size_t>(w)] = received_us;
    ++c.step_grad_count;
    return syncApplyIfComplete(index);
  }
  c.queue.push_back({.grad = std::move(grad),
                     .lr = how.final ? how.final->lr : scheduledRate(index, w),
                     .worker = w,
                     .received_us = received_us,
                     .clock = clock,
                     .final = how.final,
                     .ack = std::move(how.ack)});
  ++c.received;
  auto& through = c.pushed_through[static_cast<size_t>(w)];
  through = std::max(through, clock + 1);
  return startAsync(index);
}

std::optional<ApplyJob> ChunkStore::syncApplyIfComplete(size_t index) {
  ChunkState& c = chunks_[index];
  if (c.busy || c.step_grad_count == 0 || !stepComplete(c)) return std::nullopt;
  // The step is complete: hand its gradients to one apply.
  c.busy = true;
  ApplyJob job{.chunk = index, .key = c.key, .update = c.applied, .lr = lrOf(0, c.applied)};  // the chief's schedule is the table's
  for (size_t p = 0; p < c.step_grads.size(); ++p) {
    if (!c.step_grads[p]) continue;
    job.grads.push_back(*std::exchange(c.step_grads[p], std::nullopt));
    job.arrivals.emplace_back(static_cast<int>(p), c.step_grad_us[p]);
  }
  c.step_grad_count = 0;
  if (job.grads.size() < c.pushers.size()) {
    job.scale = static_cast<double>(c.pushers.size()) / static_cast<double>(job.grads.size());
  }
  job.awaited = !c.pulls.empty();
  return job;
}

std::optional<ApplyJob> ChunkStore::startAsync(size_t index) {
  ChunkState& c = chunks_[index];
  if (stopping_ || c.busy || c.queue.empty()) return std::nullopt;
  c.busy = true;
  QueuedPush next = std::move(c.queue.front());
  c.queue.pop_front();
  ApplyJob job{.chunk = index, .key = c.key, .update = c.applied, .lr = next.lr};
  job.grads.push_back(std::move(next.grad));
  job.arrivals.emplace_back(next.worker, next.received_us);
  job.clock = next.clock;
  job.ack = std::move(next.ack);
  job.final = next.final;
  job.awaited = !c.backup || !c.pulls.empty();  // nobody pulls from a backup while its primary lives
  return job;
}

double ChunkStore::scheduledRate(size_t index, int worker) const {
  // Async: the schedule runs over the job's global step, as TensorFlow's
  // does. SSP counts steps per worker: one round of every worker's push is
  // one schedule step. The queue is in order: the next push is update `received`.
  const uint64_t received = chunks_[index].received;
  return lrOf(worker, config_->mode == Mode::PsAsync ? received : received / static_cast<uint64_t>(config_->workers));
}

ArrivalTerms ChunkStore::staleTerms(const ChunkState& c, size_t worker, uint64_t update, double lr) const {
  ArrivalTerms terms{.lr = lr};
  if (config_->staleness_lr) {
    // The updates other pushes made to the chunk since this worker's pull (0: none).
    terms.staleness = update - std::min(c.pulled_at.at(worker), update);
    staleness_->record(terms.staleness);
    terms.lr /= static_cast<double>(std::max<uint64_t>(1, terms.staleness));
  }
  terms.mean_staleness = staleness_->mean();
  return terms;
}

ArrivalTerms ChunkStore::arrivalTerms(size_t index, int worker) const {
  const ChunkState& c = chunks_[index];
  return staleTerms(c, static_cast<size_t>(worker), c.received, scheduledRate(index, worker));
}

void ChunkStore::recordForwarded(const ArrivalTerms& terms) const {
  if (config_->staleness_lr) staleness_->record(terms.staleness);
}

bool ChunkStore::hasPush(size_t index, int worker, uint32_t clock) const {
  const ChunkState& c = chunks_[index];
  return !sync() && clock < c.pushed_through.at(static_cast<size_t>(worker));
}

void ChunkStore::apply(ApplyJob& job) {
  ChunkState& c = chunks_[job.chunk];
  std::vector<float> scratch;
  // Each sync worker pre-scaled its gradient by 1/workers: the sum is the
  // mean. An async job's one gradient is its own sum.
  // With replicas the other holder may read a push from the same shared memory.
  // A scaled sum is written to scratch: never into a pusher's own bytes.
  const bool scaled = job.scale != 1;
  float* grad = sumGradients(job.grads, static_cast<size_t>(c.length), config_->pushFormat(), scratch,
                             config_->replicas > 1 || scaled);
  if (scaled) {
    const auto factor = static_cast<float>(job.scale);
    for (int64_t i = 0; i < c.length; ++i) grad[i] *= factor;
  }
  // Async and SSP: one push, from this worker, computed on what it last pulled here.
  const auto worker = job.arrivals.empty() ? size_t{0} : static_cast<size_t>(job.arrivals.front().first);
  // A final rate has its staleness in already (replicas, which refuse delay compensation).
  const ArrivalTerms terms = job.final ? *job.final : staleTerms(c, worker, job.update, job.lr);
  const double lr = terms.lr;
  if (config_->momentum_correction) {
    // The settings copied with the momentum for the staleness so far (a
    // short name: no allocation). Not with delay compensation (refused).
    optim::OptimizerSettings settings = config_->optimizer;
    correctForStaleness(settings, terms.mean_staleness);
    applyUpdate(c, grad, job.update, lr, *config_, nullptr, &settings);
    return;
  }
  if (!compensating()) {
    applyUpdate(c, grad, job.update, lr, *config_);
    return;
  }
  const auto lambda0 = static_cast<float>(config_->delay_compensation);
  if (config_->optimizer.name == "sgd") {  // one pass: the correction inside SGD's
    // A constant lambda keeps no mean squares: a null pointer says so.
    float* mean_square = config_->delay_form == DelayForm::kAdaptive ? c.mean_square.data() : nullptr;
    const optim::DelayCorrection fused{c.pulled_by.at(worker)->data(), mean_square, lambda0, kDcMeanSquareDecay,
                                       kDcEpsilon};
    applyUpdate(c, grad, job.update, lr, *config_, &fused);
    return;
  }
  // In place: each value is read before it is written.
  compensateDelay({grad, static_cast<size_t>(c.length)}, c.param, *c.pulled_by.at(worker), c.mean_square, lambda0);
  applyUpdate(c, grad, job.update, lr, *config_);
}

void ChunkStore::holdAck(size_t index, uint32_t clock, std::string routing, uint64_t request_id) {
  ChunkState& c = chunks_[index];
  (clock == c.applied ? c.step_acks : c.ahead_acks).push_back({std::move(routing), request_id});
}

ChunkStore::Applied ChunkStore::applied(size_t index) {
  ChunkState& c = chunks_[index];
  c.busy = false;
  ++c.applied;
  Applied result{.replies = answer(c)};
  for (auto& ack : std::exchange(c.step_acks, {})) {
    result.replies.push_back({.routing = std::move(ack.routing),
                              .header = {.type = net::MessageType::kOk, .request_id = ack.request_id}});
  }
  if (!sync()) {
    result.next = startAsync(index);
  } else if (c.ahead_grad_count > 0 || !c.ahead_acks.empty()) {
    // The next step's early pushes (a backup behind the fastest worker) are this step's now.
    std::swap(c.step_grads, c.ahead_grads);
    std::swap(c.step_grad_us, c.ahead_grad_us);
    std::swap(c.step_acks, c.ahead_acks);
    c.step_grad_count = std::exchange(c.ahead_grad_count, 0);
    result.next = syncApplyIfComplete(index);
  }
  return result;
}

std::vector<Reply> ChunkStore::pull(size_t index, PendingPull p, uint32_t clock) {
  ChunkState& c = chunks_[index];
  p.needed = sync() ? clock : c.received;
  c.pulls.push_back(std::move(p));
  std::vector<Reply> replies = answer(c);
  // After a departure nothing held will be answered: fail it now.
  if (departed_) {
    for (auto& held : takeExpiredPulls(c, Clock::duration::zero(), Clock::now())) {
      replies.push_back(error(held, fmt::format("{}: pull of chunk {} cannot be answered: {}", name_, c.key,
                                                departedText())));
    }
  }
  return replies;
}

std::vector<Reply> ChunkStore::answer(ChunkState& c) {
  std::vector<Reply> replies;
  for (auto& p : takeReadyPulls(c)) {
    // What this worker's next gradients are computed on.
    std::shared_ptr<const std::vector<float>> record;
    if (!p.with_state && p.worker >= 0 && p.worker < config_->workers) {
      if (compensating()) record = recordPull(c, static_cast<size_t>(p.worker));
      if (config_->staleness_lr) c.pulled_at[static_cast<size_t>(p.worker)] = c.applied;
    }
    Reply r{.routing = p.routing,
            .header = {.type = msg::kValues, .clock = static_cast<uint32_t>(c.applied), .request_id = p.request_id,
                       .key_begin = c.key, .key_end = c.key + 1},
            .worker = p.worker,
            .received_us = p.received_us};
    if (p.into) {
      r.header.flags = net::kFlagInArena;
      r.payload = pullIntoArena(c, *p.into, config_->wire);
      r.shared_bytes = p.into->bytes.size();
    } else if (record && config_->wire == WireDtype::kFloat32) {
      r.payload = {record, std::as_bytes(std::span(*record))};  // the record is the reply
    } else {
      r.payload = pullPayload(c, p, sync(), config_->wire);
    }
    replies.push_back(std::move(r));
  }
  return replies;
}

Reply ChunkStore::error(const PendingPull& p, const std::string& reason) const {
  return {.routing = p.routing,
          .header = {.type = net::MessageType::kError, .request_id = p.request_id},
          .payload = shared(copyBytes(reason))};
}

std::vector<Reply> ChunkStore::expire(Clock::time_point now) {
  std::vector<Reply> replies;
  if (!config_) return replies;
  const auto timeout = departed_ ? Clock::duration::zero()
                                 : std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(config_->peer_timeout_s));
  for (auto& c : chunks_) {
    const auto expired = takeExpiredPulls(c, timeout, now);
    if (expired.empty()) continue;
    std::vector<std::string> missing;
    for (int w : missingPushers(c)) missing.push_back(fmt::format("worker {}", w));
    const std::string who = sync() && !missing.empty()
                                ? fmt::format("; no push of step {} from {}", c.applied, fmt::join(missing, ", "))
                                : "";
    for (const auto& p : expired) {
      replies.push_back(error(
          p, departed_ ? fmt::format("{}: pull of chunk {} cannot be answered: {}", name_, c.key, departedText())
                       : fmt::format("{}: pull of chunk {} waited {} (--peer-timeout){}", name_, c.key, config_->peerTimeoutText(),
                                     who)));
    }
  }
  return replies;
}

bool ChunkStore::stepComplete(const ChunkState& c) const {
  if (c.step_grad_count == static_cast<int>(c.pushers.size())) return true;  // everyone's in: nobody left
  return std::none_of(c.pushers.begin(), c.pushers.end(),
                      [&](int w) { return awaits(w, c.applied) && !c.step_grads[static_cast<size_t>(w)]; });
}

std::vector<int> ChunkStore::missingPushers(const ChunkState& c) const {
  std::vector<int> missing;
  for (int w : c.pushers) {
    if (awaits(w, c.applied) && !c.step_grads[static_cast<size_t>(w)]) missing.push_back(w);
  }
  return missing;
}

std::vector<ApplyJob> ChunkStore::leave(int worker) {
  std::vector<ApplyJob> jobs;
  if (!config_ || !sync()) return jobs;
  joins_at_.at(static_cast<size_t>(worker)) = kLeft;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (auto job = syncApplyIfComplete(i)) jobs.push_back(std::move(*job));
  }
  return jobs;
}

void ChunkStore::joinAt(int worker, uint32_t step) {
  if (!config_ || !sync()) return;
  for (const ChunkState& c : chunks_) {
    if (c.applied > step && std::binary_search(c.pushers.begin(), c.pushers.end(), worker)) {
      throw Refusal{fmt::format("worker {} joins to push from step {}, but chunk {} is at step {} already", worker,
                                step, c.key, c.applied)};
    }
  }
  joins_at_.at(static_cast<size_t>(worker)) = step;
}

bool ChunkStore::depart(int worker) {
  // Async and SSP take the worker back when it starts again (elastic).
  if (!config_ || !sync() || departed_) return false;
  departed_ = worker;
  return true;
}

std::string ChunkStore::departedText() const {
  return fmt::format("worker {} left to start again in place (--restart-wait; its log says why)", *departed_);
}

bool ChunkStore::holdsPullOf(const std::string& routing) const {
  return std::any_of(chunks_.begin(), chunks_.end(), [&](const ChunkState& c) {
    return std::any_of(c.pulls.begin(), c.pulls.end(), [&](const PendingPull& p) { return p.routing == routing; });
  });
}

bool ChunkStore::busy() const {
  return std::any_of(chunks_.begin(), chunks_.end(), [](const ChunkState& c) { return c.busy; });
}

}  // namespace tandem::ps
