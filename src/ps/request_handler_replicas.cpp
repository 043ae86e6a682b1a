// RequestHandler's side of --ps-replicas 2 in async and SSP jobs: the
// primary forwards each push to the chunk's backup as it arrives, the
// backup takes forwards in the primary's order, and a push is acknowledged
// once both hold it (ReplicaForwarding keeps the count).
#include <fmt/format.h>

#include "core/fnv1a.hpp"
#include "core/logging.hpp"
#include "ps/messages.hpp"
#include "ps/request_handler.hpp"

namespace tandem::ps {

HeldAck RequestHandler::forward(Outbox& out, const Request& r, size_t index, int worker, double rate,
                                std::span<const std::byte> grad) {
  const ChunkState& c = store_.at(index);
  const HeldAck ack = forwarding_.hold({r.routing, r.header.request_id});
  out.forwards.push_back(
      {.id = ack.forward,
       .header = {.type = msg::kForward, .clock = r.header.clock, .key_begin = c.key, .key_end = c.key + 1},
       .payload = encodeForward({.worker = static_cast<uint32_t>(worker),
                                 .clock = r.header.clock,
                                 .update = store_.nextUpdate(index),
                                 .lr = rate},
                                grad)});
  ++stats_.forwards_out;
  return ack;
}

void RequestHandler::onForward(Outbox& out, const Request& r) {
  if (!config_ || config_->mode == Mode::PsSync || config_->replicas < 2) {
    throw Refusal{fmt::format("ps-forward: {} serves no async or bounded-staleness job with --ps-replicas 2", name_)};
  }
  const size_t index = store_.indexOf(r.header);
  const ChunkState& c = store_.at(index);
  if (!c.backup) throw Refusal{fmt::format("ps-forward of chunk {}: {} is its primary, not its backup", c.key, name_)};
  if (!admission_.isReady()) throw Refusal{"ps-forward before every chunk was initialised"};
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
  std::optional<ApplyJob> job =
      store_.push(w, index, head.clock, std::move(bytes), timelineNow(), {.final_lr = head.lr});
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

Outbox RequestHandler::forwarded(uint64_t id, const std::string& failure, bool lost) {
  const std::string backup = successor() != nullptr ? successor()->name : std::string("the backup");
  const ReplicaForwarding::Outcome outcome = forwarding_.answered(id, failure, lost);
  if (outcome.newly_lost) {
    TANDEM_LOG_WARN("{}: {}, the backup of this server's chunks, is lost; they go on with one copy here "
                    "(--ps-replicas 2)",
                    name_, backup);
  }
  Outbox out;
  for (const HeldAck& ack : outcome.acknowledged) replyOk(out, ack.routing, ack.request_id);
  if (outcome.refused) {
    replyError(out, outcome.refused->routing, outcome.refused->request_id,
               fmt::format("{}: the backup {} refused this push's forward: {}", name_, backup, failure));
  }
  return out;
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
