#include "cluster/quorum.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "cluster/cluster_spec.hpp"
#include "core/error.hpp"

namespace tandem::cluster {
namespace {

std::string seconds(std::chrono::steady_clock::duration d) {
  return fmt::format("{:.1f}s", std::chrono::duration<double>(d).count());
}

bool contains(const std::vector<int>& sorted, int worker) {
  return std::binary_search(sorted.begin(), sorted.end(), worker);
}

std::string describe(const std::vector<Departure>& departed) {
  std::vector<std::string> parts;
  for (const auto& d : departed) parts.push_back(fmt::format("{} ({})", taskName(Role::kWorker, d.worker), d.why));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::optional<int> Membership::rankOf(int worker) const {
  const auto it = std::lower_bound(workers.begin(), workers.end(), worker);
  if (it == workers.end() || *it != worker) return std::nullopt;
  return static_cast<int>(it - workers.begin());
}

Quorum::Quorum(int initial_workers, int64_t first_step, QuorumOptions options, QuorumTime now)
    : options_(options) {
  if (initial_workers < 1) throw InputError(fmt::format("a job needs at least one worker, got {}", initial_workers));
  if (options_.max_workers == 0) options_.max_workers = initial_workers;
  if (options_.min_workers < 1 || options_.min_workers > initial_workers) {
    throw InputError(fmt::format("--min-workers {}: expected 1 to the job's {} workers", options_.min_workers,
                                 initial_workers));
  }
  if (options_.max_workers < initial_workers) {
    throw InputError(fmt::format("--max-workers {} is below the job's {} workers", options_.max_workers,
                                 initial_workers));
  }
  current_.step = first_step;
  for (int w = 0; w < initial_workers; ++w) {
    current_.workers.push_back(w);
    seen_[w].last = now;
  }
}

bool Quorum::alive(int worker, QuorumTime now) {
  const auto it = seen_.find(worker);
  if (it == seen_.end()) return false;
  Seen& s = it->second;
  const auto silence = round_opened_ && options_.suspect_after.count() > 0
                           ? std::min(options_.suspect_after, options_.heartbeat_timeout)
                           : options_.heartbeat_timeout;
  if (!s.dead && now - s.last > silence) {
    s.dead = true;
    s.why = fmt::format("silent for {}", seconds(now - s.last));
  }
  return !s.dead;
}

bool Quorum::anyMemberLost(QuorumTime now) {
  bool lost = false;
  for (int w : current_.workers) lost = !alive(w, now) || lost;  // every member checked, so each death is stamped
  return lost;
}

bool Quorum::canAdmitJoiner() const {
  int live = 0;
  for (int w : current_.workers) live += seen_.at(w).dead ? 0 : 1;
  return live < options_.max_workers;
}

void Quorum::heartbeat(int worker, QuorumTime now) {
  auto& s = seen_[worker];
  if (!s.dead) s.last = std::max(s.last, now);
}

void Quorum::arrive(int worker, int64_t generation, int64_t step, QuorumTime now) {
  const bool member = contains(current_.workers, worker);
  // A member asking about a round that has formed already learns the result from poll().
  if (member && generation < current_.generation) return;
  Seen& s = seen_[worker];
  s.dead = false;
  s.why.clear();
  s.last = std::max(s.last, now);
  arrivals_[worker] = Arrival{step, now};
  if (!round_opened_ && (member || canAdmitJoiner())) round_opened_ = now;
}

void Quorum::leave(int worker, QuorumTime now) {
  Seen& s = seen_[worker];
  s.dead = true;
  s.why = "left";
  s.last = now;
  arrivals_.erase(worker);
}

QuorumView Quorum::poll(QuorumTime now) {
  QuorumView view;
  if (!stopped_) {
    if (anyMemberLost(now) && !round_opened_) round_opened_ = now;
    if (round_opened_) {
      std::vector<int> awaited;
      for (int w : current_.workers) {
        if (alive(w, now) && !arrivals_.contains(w)) awaited.push_back(w);
      }
      if (awaited.empty() || now - *round_opened_ >= options_.arrival_timeout) form(now);
    }
  }
  view.current = current_;
  view.stopped = stopped_;
  view.round_open = round_opened_.has_value() && !stopped_;
  if (view.round_open) {
    for (int w : current_.workers) {
      if (alive(w, now) && !arrivals_.contains(w)) view.awaited.push_back(w);
    }
  }
  return view;
}

void Quorum::form(QuorumTime now) {
  Membership next;
  next.generation = current_.generation + 1;
  std::vector<int> joiners;  // live arrivals from outside, first come first admitted
  for (const auto& [w, arrival] : arrivals_) {
    if (!alive(w, now)) continue;
    if (contains(current_.workers, w)) {
      next.workers.push_back(w);
    } else {
      joiners.push_back(w);
    }
  }
  std::stable_sort(joiners.begin(), joiners.end(),
                   [&](int a, int b) { return arrivals_.at(a).at < arrivals_.at(b).at; });
  const size_t room = static_cast<size_t>(std::max(0, options_.max_workers - next.size()));
  if (joiners.size() > room) joiners.resize(room);
  next.joined = joiners;
  next.workers.insert(next.workers.end(), joiners.begin(), joiners.end());
  std::sort(next.workers.begin(), next.workers.end());

  for (int w : current_.workers) {
    if (contains(next.workers, w)) {
      // A member that comes with no state is a new process in its place:
      // the one before died, and this one joins.
      if (arrivals_.at(w).step < 0) {
        next.departed.push_back({w, "its process restarted"});
        next.joined.push_back(w);
      }
      continue;
    }
    Seen& s = seen_[w];
    if (!s.dead) {
      // Alive but never came: stuck in a collective. It may come back as a joiner.
      s.dead = true;
      s.why = fmt::format("did not reach the step boundary within {}", seconds(now - *round_opened_));
    }
    next.departed.push_back({w, s.why});
  }

  std::sort(next.joined.begin(), next.joined.end());
  round_opened_.reset();
  std::erase_if(arrivals_, [&](const auto& entry) { return !alive(entry.first, now); });
  if (next.size() < options_.min_workers) {
    stopped_ = fmt::format("{} worker{} left, fewer than --min-workers {}; lost: {}", next.size(),
                           next.size() == 1 ? "" : "s", options_.min_workers, describe(next.departed));
    return;
  }
  int64_t step = -1;
  for (int w : next.workers) step = std::max(step, arrivals_.at(w).step);
  if (step < 0) {
    stopped_ = fmt::format("no worker with the model's state is left; lost: {}", describe(next.departed));
    return;
  }
  next.step = step;
  for (int w : next.workers) {
    if (arrivals_.at(w).step == step) {
      if (next.source < 0) next.source = w;
    } else {
      next.healing.push_back(w);
    }
  }
  if (next.healing.empty()) next.source = -1;
  for (int w : next.workers) arrivals_.erase(w);
  current_ = std::move(next);
  // Joiners left waiting for room open the next round once there is some.
  for (const auto& [w, arrival] : arrivals_) {
    if (!contains(current_.workers, w) && canAdmitJoiner()) {
      round_opened_ = now;
      break;
    }
  }
}

}  // namespace tandem::cluster
