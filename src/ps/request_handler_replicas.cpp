// RequestHandler's side of --ps-replicas 2 in async and SSP jobs: the
// primary forwards each push to the chunk's other holder as it arrives,
// that holder takes forwards in the primary's order, and a push is
// acknowledged once both hold it (ReplicaForwarding keeps the count). A
// lost holder's replacement is brought up by the live one: the chief asks
// it (ps-replicate), it copies each chunk between two applies (ps-copy),
// forwards the pushes after it, and mirrors where the workers stand.
#include <fmt/format.h>

#include <cmath>

#include "core/fnv1a.hpp"
#include "core/logging.hpp"
#include "ps/messages.hpp"
#include "ps/request_handler.hpp"

namespace tandem::ps {
namespace {

net::FrameHeader chunkHeader(net::MessageType type, const ChunkState& c, uint32_t clock = 0) {
  return {.type = type, .clock = clock, .key_begin = c.key, .key_end = c.key + 1};
}

}  // namespace

void RequestHandler::requireAsyncReplicas(const char* what) const {
  if (!config_ || config_->mode == Mode::PsSync || config_->replicas < 2) {
    throw Refusal{fmt::format("{}: {} serves no async or bounded-staleness job with --ps-replicas 2", what, name_)};
  }
}

HeldAck RequestHandler::forward(Outbox& out, const Request& r, size_t index, int worker, const ArrivalTerms& terms,
                                std::span<const std::byte> grad) {
  const ChunkState& c = store_.at(index);
  const int to = forward_to_[index];
  const HeldAck ack = forwarding_.hold({r.routing, r.header.request_id}, to);
  out.forwards.push_back({.id = ack.forward,
                          .to = to,
                          .header = chunkHeader(msg::kForward, c, r.header.clock),
                          .payload = encodeForward({.worker = static_cast<uint32_t>(worker),
                                                    .clock = r.header.clock,
                                                    .update = store_.nextUpdate(index),
                                                    .lr = terms.lr,
                                                    .staleness = terms.staleness,
                                                    .mean_staleness = terms.mean_staleness},
                                                   grad)});
  ++stats_.forwards_out;
  return ack;
}

void RequestHandler::onForward(Outbox& out, const Request& r) {
  requireAsyncReplicas("ps-forward");
  const size_t index = store_.indexOf(r.header);
  const ChunkState& c = store_.at(index);
  if (!c.backup && !c.copied) {
    throw Refusal{fmt::format("ps-forward of chunk {}: {} is its primary, not its backup", c.key, name_)};
  }
  if (!c.initialized) throw Refusal{fmt::format("ps-forward of chunk {} before it was set", c.key)};
  std::span<const std::byte> grad;
  ForwardHead head;
  try {
    head = decodeForward(r.payload.view(), "the chunk's primary", grad);
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  if (head.worker >= static_cast<uint32_t>(config_->workers)) {
    throw Refusal{fmt::format("ps-forward of chunk {} names worker {} of {}", c.key, head.worker, config_->workers)};
  }
  store_.requirePayload(index, r.header.type, grad, config_->pushFormat());
  // The primary's order is the backup's: a gap or a repeat would part them.
  if (head.update != c.received) {
    throw Refusal{fmt::format("ps-forward of chunk {}: update {} arrived where {} holds {}; the replicas would differ",
                              c.key, head.update, name_, c.received)};
  }
  OwnedBytes bytes{r.payload.owner,
                   {const_cast<std::byte*>(grad.data()), grad.size()}};  // the received message, which we own
  const int w = static_cast<int>(head.worker);
  const ArrivalTerms terms{.lr = head.lr, .staleness = head.staleness, .mean_staleness = head.mean_staleness};
  // Counted here too: this server's summary, and its rates once it orders the pushes itself.
  store_.recordForwarded(terms);
  std::optional<ApplyJob> job = store_.push(w, index, head.clock, std::move(bytes), timelineNow(), {.final = terms});
  ++stats_.forwards_in;
  stats_.bytes_in += grad.size();
  // Its place in this chunk's order is fixed and its bytes are ours: both
  // holders have it, in the same order, and the primary may acknowledge it.
  replyOk(out, r.routing, r.header.request_id);
  if (job) out.applies.push_back(std::move(*job));
}

void RequestHandler::acknowledgeApplied(Outbox& out, HeldAck ack) {
  const std::optional<HeldAck> ready = ack.forward == 0 ? std::optional(std::move(ack)) : forwarding_.applied(ack.forward);
  if (ready) replyOk(out, ready->routing, ready->request_id);
}

Outbox RequestHandler::forwarded(uint64_t id, int to, const std::string& failure, bool lost) {
  const Destination* dest = destination(to);
  const std::string other = dest != nullptr ? dest->name : std::string("the other holder");
  const ReplicaForwarding::Outcome outcome = forwarding_.answered(id, to, failure, lost);
  if (outcome.newly_lost) {
    TANDEM_LOG_WARN("{}: {}, the other holder of chunks here, is lost; they go on with one copy here "
                    "(--ps-replicas 2)",
                    name_, other);
    for (int& d : forward_to_) d = d == to ? -1 : d;
    for (int& d : copy_to_) d = d == to ? -1 : d;
  }
  Outbox out;
  for (const HeldAck& ack : outcome.acknowledged) replyOk(out, ack.routing, ack.request_id);
  if (outcome.refused) {
    replyError(out, outcome.refused->routing, outcome.refused->request_id,
               fmt::format("{}: {} refused this push's forward: {}", name_, other, failure));
  }
  return out;
}

// --- bringing a replacement up ----------------------------------------------

void RequestHandler::onReplicate(Outbox& out, const Request& r) {
  requireAsyncReplicas("ps-replicate");
  ReplicaRequest request;
  try {
    request = decodeReplicaRequest(r.payload.view(), "the chief");
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  std::vector<size_t> indices;
  for (uint64_t key : request.keys) {
    indices.push_back(store_.indexOf({.type = msg::kReplicate, .key_begin = key, .key_end = key + 1}));
  }
  const int to = forwarding_.add(request.endpoint, request.name);
  TANDEM_LOG_WARN("{}: {}'s replacement is up; copying it {} chunk(s) and forwarding their pushes there "
                  "(--ps-replicas 2)",
                  name_, request.name, indices.size());
  mirrorWorkers(out);  // ahead of the chunks: a worker may fail over as soon as they are in
  for (size_t index : indices) {
    forward_to_[index] = -1;  // until the copy: its pushes have their one copy here
    if (store_.at(index).busy) {
      copy_to_[index] = to;  // between this apply and the next
    } else {
      copyChunk(out, index, to, nullptr);
    }
  }
  replyOk(out, r.routing, r.header.request_id);
}

void RequestHandler::copyChunk(Outbox& out, size_t index, int to, ApplyJob* next) {
  const ChunkState& c = store_.at(index);
  const CopyHead head = store_.copyHead(index);
  const SharedBytes state = packState(c);
  out.forwards.push_back({.id = forwarding_.untracked(),
                          .to = to,
                          .header = chunkHeader(msg::kCopy, c),
                          .payload = encodeCopy(head, state.bytes)});
  // The pushes received after that state, in their order: the replacement
  // applies them as forwards, and each is acknowledged once both hold it.
  uint64_t update = head.applied;
  // Each with the terms its arrival here decided, so the replacement applies it alike.
  auto send = [&](std::optional<HeldAck>& ack, int worker, uint32_t clock, const ArrivalTerms& terms,
                  const OwnedBytes& grad) {
    uint64_t id = forwarding_.untracked();
    if (ack) {
      ack = forwarding_.hold(*ack, to);
      id = ack->forward;
    }
    out.forwards.push_back({.id = id,
                            .to = to,
                            .header = chunkHeader(msg::kForward, c, clock),
                            .payload = encodeForward({.worker = static_cast<uint32_t>(worker),
                                                      .clock = clock,
                                                      .update = update++,
                                                      .lr = terms.lr,
                                                      .staleness = terms.staleness,
                                                      .mean_staleness = terms.mean_staleness},
                                                     grad.view())});
    ++stats_.forwards_out;
  };
  if (next != nullptr) {
    send(next->ack, next->arrivals.front().first, next->clock, next->final.value_or(ArrivalTerms{.lr = next->lr}),
         next->grads.front());
  }
  for (QueuedPush& p : store_.queued(index)) {
    send(p.ack, p.worker, p.clock, p.final.value_or(ArrivalTerms{.lr = p.lr}), p.grad);
  }
  forward_to_[index] = to;
}

void RequestHandler::onCopy(Outbox& out, const Request& r) {
  requireAsyncReplicas("ps-copy");
  const size_t index = store_.indexOf(r.header);
  if (admission_.isReady()) {
    throw Refusal{fmt::format("ps-copy of chunk {}: {} has every chunk already", store_.at(index).key, name_)};
  }
  std::span<const std::byte> state;
  CopyHead head;
  try {
    head = decodeCopy(r.payload.view(), static_cast<size_t>(config_->workers), "the chunk's other holder", state);
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  store_.copyIn(index, head, state);
  replyOk(out, r.routing, r.header.request_id);
  if (store_.everyChunkSet() && !admission_.isReady()) {
    fed_ = true;
    TANDEM_LOG_WARN("{}: every chunk is copied from its other holder; this replacement takes requests "
                    "(--ps-replicas 2)",
                    name_);
  }
  checkReady(out);
}

void RequestHandler::onMirror(Outbox& out, const Request& r) {
  requireAsyncReplicas("ps-mirror");
  WorkerMirror mirror;
  try {
    mirror = decodeWorkerMirror(r.payload.view(), static_cast<size_t>(config_->workers), "the chunk's other holder");
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  if (keepsClocks()) clocks_->adopt(mirror);
  for (size_t w = 0; w < mirror.lr.size(); ++w) {
    if (!std::isnan(mirror.lr[w])) store_.setLr(static_cast<int>(w), mirror.lr[w]);
  }
  replyOk(out, r.routing, r.header.request_id);
}

void RequestHandler::mirrorWorkers(Outbox& out) {
  const std::vector<int> mirrors = forwarding_.mirrors();
  if (mirrors.empty() || !config_) return;
  WorkerMirror mirror;
  if (keepsClocks()) mirror = clocks_->mirror();
  for (int w = 0; w < config_->workers; ++w) mirror.lr.push_back(store_.lrSent(w).value_or(std::nan("")));
  const std::vector<char> bytes = encode(mirror);
  for (int to : mirrors) {
    out.forwards.push_back({.id = forwarding_.untracked(), .to = to, .header = {.type = msg::kMirror}, .payload = bytes});
  }
}

nlohmann::json RequestHandler::chunkDigests() const {
  // Each chunk's values and optimizer slots, fingerprinted: the two
  // holders of a chunk that applied the same updates in the same order agree.
  nlohmann::json digests = nlohmann::json::object();
  for (const auto& c : store_.chunks()) {
    Fnv1a digest;
    digest.add(c.param.data(), c.param.size() * sizeof(float));
    for (const auto& slot : c.slots) digest.add(slot.data(), slot.size() * sizeof(float));
    digests[std::to_string(c.key)] = {{"digest", fmt::format("{:016x}", digest.value())}, {"updates", c.applied}};
  }
  return digests;
}

}  // namespace tandem::ps
