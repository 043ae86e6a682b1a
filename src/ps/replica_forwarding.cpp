#include "ps/replica_forwarding.hpp"

#include <utility>

namespace tandem::ps {

void ReplicaForwarding::reset(std::optional<Destination> successor) {
  destinations_.clear();
  if (successor) {
    successor->generation = ++adds_;
    destinations_.push_back(std::move(*successor));
  }
  pending_.clear();
}

int ReplicaForwarding::add(const std::string& endpoint, const std::string& name) {
  for (size_t d = 0; d < destinations_.size(); ++d) {
    Destination& dest = destinations_[d];
    if (dest.endpoint != endpoint) continue;
    if (dest.lost) dest.generation = ++adds_;  // a new server there: connect anew
    dest.lost = false;
    dest.mirrored = true;
    dest.name = name;
    return static_cast<int>(d);
  }
  destinations_.push_back({.endpoint = endpoint, .name = name, .mirrored = true, .generation = ++adds_});
  return static_cast<int>(destinations_.size() - 1);
}

const ReplicaForwarding::Destination* ReplicaForwarding::destination(int d) const {
  if (d < 0 || static_cast<size_t>(d) >= destinations_.size() || destinations_[static_cast<size_t>(d)].lost) {
    return nullptr;
  }
  return &destinations_[static_cast<size_t>(d)];
}

std::vector<int> ReplicaForwarding::mirrors() const {
  std::vector<int> out;
  for (size_t d = 0; d < destinations_.size(); ++d) {
    if (destinations_[d].mirrored && !destinations_[d].lost) out.push_back(static_cast<int>(d));
  }
  return out;
}

HeldAck ReplicaForwarding::hold(HeldAck ack, int to) {
  ack.forward = next_id_++;
  pending_.emplace(ack.forward, Pending{.ack = ack, .to = to});
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
  if (it == pending_.end()) return std::nullopt;  // the destination refused it: its pusher was told
  it->second.applied = true;
  return settle(it);
}

ReplicaForwarding::Outcome ReplicaForwarding::answered(uint64_t id, int to, const std::string& failure, bool lost) {
  Outcome out;
  const bool known = to >= 0 && static_cast<size_t>(to) < destinations_.size();
  if (lost && known) {
    Destination& dest = destinations_[static_cast<size_t>(to)];
    out.newly_lost = !dest.lost;
    dest.lost = true;
    // The pushes applied here are all there is now; the rest go out once applied.
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto next = std::next(it);
      if (it->second.to == to) {
        it->second.answered = true;
        if (auto ack = settle(it)) out.acknowledged.push_back(std::move(*ack));
      }
      it = next;
    }
    return out;
  }
  const auto it = pending_.find(id);
  if (it == pending_.end()) return out;  // untracked, or counted as answered when its destination was lost
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
