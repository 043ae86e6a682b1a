#include "ps/replica_forwarding.hpp"

#include <utility>

namespace tandem::ps {

void ReplicaForwarding::reset(std::optional<Successor> successor) {
  successor_ = std::move(successor);
  lost_ = false;
  pending_.clear();
}

HeldAck ReplicaForwarding::hold(HeldAck ack) {
  ack.forward = next_id_++;
  pending_.emplace(ack.forward, Pending{.ack = ack});
  return ack;
}

std::optional<HeldAck> ReplicaForwarding::settle(Map::iterator it) {
  if (!it->second.applied || !it->second.answered) return std::nullopt;
  HeldAck ack = std::move(it->second.ack);
  pending_.erase(it);
  return ack;
}

std::optional<HeldAck> ReplicaForwarding::applied(uint64_t id) {
  const auto it = pending_.find(id);
  if (it == pending_.end()) return std::nullopt;  // the backup refused it: its pusher was told
  it->second.applied = true;
  return settle(it);
}

ReplicaForwarding::Outcome ReplicaForwarding::answered(uint64_t id, const std::string& failure, bool lost) {
  Outcome out;
  if (lost) {
    out.newly_lost = !lost_ && successor_.has_value();
    lost_ = true;
    // The pushes applied here are all there is now; the rest go out once applied.
    for (auto it = pending_.begin(); it != pending_.end();) {
      it->second.answered = true;
      auto next = std::next(it);
      if (auto ack = settle(it)) out.acknowledged.push_back(std::move(*ack));
      it = next;
    }
    return out;
  }
  if (lost_) return out;  // every held push counted as answered already
  const auto it = pending_.find(id);
  if (it == pending_.end()) return out;
  if (!failure.empty()) {
    out.refused = std::move(it->second.ack);
    pending_.erase(it);
    return out;
  }
  it->second.answered = true;
  if (auto ack = settle(it)) out.acknowledged.push_back(std::move(*ack));
  return out;
}

}  // namespace tandem::ps
