#include "ps/step_clocks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.hpp"

namespace tandem::ps {

StepClocks::StepClocks(Mode mode, int staleness, int workers, uint32_t start_step, uint64_t total_steps)
    : mode_(mode),
      staleness_(staleness),
      clocks_(static_cast<size_t>(workers), start_step),
      done_(static_cast<size_t>(workers), false),
      lost_(static_cast<size_t>(workers), false),
      joining_(static_cast<size_t>(workers), false),
      holds_grant_(static_cast<size_t>(workers), true),
      start_step_(start_step),
      total_steps_(total_steps),
      granted_(start_step + static_cast<uint64_t>(workers)) {}

void StepClocks::returnGrant(int worker) {
  if (holds_grant_[static_cast<size_t>(worker)]) {
    holds_grant_[static_cast<size_t>(worker)] = false;
    --granted_;
  }
}

void StepClocks::report(int worker, uint32_t clock, const StepReport& report, std::string routing,
                        uint64_t request_id) {
  uint32_t& mine = clocks_[static_cast<size_t>(worker)];
  if (adopted_ && clock == mine && clock > start_step_) {
    pending_.push_back({std::move(routing), request_id, worker, clock, report, Clock::now(), false, true});
    return;
  }
  if (adopted_ && clock > mine + 1) {
    // The mirror lags its holder, which answered these reports (each
    // granting a step) just before it died: they count as they did there.
    const uint32_t answered_there = clock - mine - 1;
    reported_ += answered_there;
    if (mode_ == Mode::PsAsync) granted_ += answered_there;
    mine = clock - 1;
  }
  if (clock != mine + 1) {
    throw InputError(
        fmt::format("worker {} reported step {} finished, but its last report was step {}", worker, clock, mine));
  }
  mine = clock;
  ++reported_;
  unhold(worker);
  holds_grant_[static_cast<size_t>(worker)] = false;
  Totals& t = totals_[clock];
  const bool joins = joining_[static_cast<size_t>(worker)];
  joining_[static_cast<size_t>(worker)] = false;
  if (!joins) {
    t.loss_sum += report.loss;
    ++t.reports;
  }
  t.slowest = std::max(t.slowest, report.compute_seconds);
  t.stop = t.stop || report.stop;
  t.checkpoint = t.checkpoint || report.checkpoint;
  if (report.rejoining_server != kNoServer) t.rejoining_server = report.rejoining_server;
  pending_.push_back({std::move(routing), request_id, worker, clock, report, Clock::now()});
}

void StepClocks::finish(int worker) {
  unhold(worker);
  done_[static_cast<size_t>(worker)] = true;
  returnGrant(worker);  // stopped early (a signal): its granted step is free again
}

void StepClocks::lose(int worker) {
  unhold(worker);
  lost_[static_cast<size_t>(worker)] = true;
  returnGrant(worker);
}

void StepClocks::hold(int worker, std::string routing, uint64_t request_id) {
  if (mode_ == Mode::PsSync) throw InputError("ps-hold: a sync job's every step is a snapshot already");
  if (hold_) throw InputError(fmt::format("ps-hold: worker {} holds the job already", hold_->worker));
  hold_ = Hold{worker, std::move(routing), request_id};
}

void StepClocks::unhold(int worker) {
  if (hold_ && hold_->worker == worker) hold_.reset();
}

std::optional<StepClocks::HoldAnswer> StepClocks::takeHoldAnswer() {
  if (!hold_ || hold_->answered) return std::nullopt;
  for (size_t w = 0; w < clocks_.size(); ++w) {
    const int worker = static_cast<int>(w);
    if (worker != hold_->worker && !done_[w] && !lost_[w] && !isWaiting(worker)) return std::nullopt;
  }
  hold_->answered = true;
  HoldAnswer answer{hold_->routing, hold_->request_id, {globalStep(), {}}};
  // A lost worker's last pushes may never arrive: nothing is awaited of it.
  for (size_t w = 0; w < clocks_.size(); ++w) answer.point.clocks.push_back(lost_[w] ? 0 : clocks_[w]);
  return answer;
}

bool StepClocks::rejoin(int worker) {
  const auto w = static_cast<size_t>(worker);
  lost_[w] = false;
  done_[w] = false;
  returnGrant(worker);
  if (mode_ != Mode::PsAsync) return true;
  // Every step of the job granted already (a death near the end): the
  // replacement makes none, or the job would overshoot its steps.
  if (granted_ >= total_steps_) return false;
  ++granted_;
  holds_grant_[w] = true;
  return true;
}

uint32_t StepClocks::joinSync(int worker, std::optional<uint32_t> given) {
  const auto w = static_cast<size_t>(worker);
  // The dead one's held requests would be answered to nobody.
  std::erase_if(pending_, [&](const Pending& p) { return p.worker == worker; });
  std::erase_if(awaits_, [&](const Await& a) { return a.worker == worker; });
  unhold(worker);
  lost_[w] = false;
  done_[w] = false;
  uint32_t clock = 0;
  if (given) {
    clock = *given;
  } else {
    uint32_t least = std::numeric_limits<uint32_t>::max(), furthest = 0, last = 0;
    for (size_t o = 0; o < clocks_.size(); ++o) {
      if (o == w) continue;
      last = std::max(last, clocks_[o]);
      if (!holdsBack(o)) continue;
      least = std::min(least, clocks_[o]);
      furthest = std::max(furthest, clocks_[o]);
    }
    // Nobody else steps any more (the job's end): it starts where they ended.
    clock = least > furthest ? last : (least == furthest ? furthest : furthest - 1);
  }
  clocks_[w] = clock;
  joining_[w] = true;
  return clock;
}

std::vector<uint32_t> StepClocks::stepsByWorker() const {
  std::vector<uint32_t> steps;
  for (uint32_t clock : clocks_) steps.push_back(clock - static_cast<uint32_t>(start_step_));
  return steps;
}

void StepClocks::awaitOthers(int worker, std::string routing, uint64_t request_id) {
  awaits_.push_back({std::move(routing), request_id, worker});
}

uint32_t StepClocks::slowest() const {
  uint32_t slowest = std::numeric_limits<uint32_t>::max();
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (holdsBack(w)) slowest = std::min(slowest, clocks_[w]);
  }
  return slowest;
}

uint64_t StepClocks::globalStep() const {
  if (mode_ == Mode::PsAsync) return start_step_ + reported_;
  return *std::max_element(clocks_.begin(), clocks_.end());
}

int64_t StepClocks::allowedLead() const {
  if (mode_ == Mode::PsSync) return 0;
  if (mode_ == Mode::Ssp) return staleness_;
  return std::numeric_limits<int64_t>::max() / 2;
}

std::vector<StepClocks::Answer> StepClocks::release() {
  const uint32_t slowest_clock = slowest();
  const int64_t lead = allowedLead();
  // A hold keeps every report (only its holder reports, which ends it).
  auto keep = std::stable_partition(pending_.begin(), pending_.end(), [&](const Pending& p) {
    return hold_.has_value() || static_cast<int64_t>(p.clock) - static_cast<int64_t>(slowest_clock) > lead;
  });
  std::vector<Answer> answers;
  for (auto it = keep; it != pending_.end(); ++it) {
    StepAgreement a;
    a.slowest_clock = std::min(slowest_clock, it->clock);
    max_staleness_ = std::max(max_staleness_, it->clock - a.slowest_clock);
    if (mode_ == Mode::PsSync) {
      const Totals& t = totals_[it->clock];
      a.loss = t.loss_sum / std::max(1, t.reports);
      a.slowest_compute_seconds = t.slowest;
      a.stop = t.stop;
      a.checkpoint = t.checkpoint;
      a.rejoining_server = t.rejoining_server;
    } else {
      a.loss = it->report.loss;
      a.slowest_compute_seconds = it->report.compute_seconds;
      a.stop = it->report.stop;
    }
    a.global_step = it->clock;
    if (mode_ == Mode::PsAsync) {
      a.global_step = globalStep();
      // Asked again: the step its lost keeper granted (mirrored) is still its own.
      const bool granted_already = it->again && holds_grant_[static_cast<size_t>(it->worker)];
      a.finished = !granted_already && granted_ >= total_steps_;
      if (!a.finished && !a.stop && !granted_already) {
        ++granted_;
        holds_grant_[static_cast<size_t>(it->worker)] = true;
      }
    }
    answers.push_back({std::move(it->routing), it->request_id, it->clock, a});
  }
  pending_.erase(keep, pending_.end());
  auto ended = [&](size_t w) { return done_[w] || lost_[w]; };
  for (auto it = awaits_.begin(); it != awaits_.end();) {
    bool others_ended = true;
    for (size_t w = 0; w < clocks_.size(); ++w) {
      others_ended = others_ended && (static_cast<int>(w) == it->worker || ended(w));
    }
    if (!others_ended) {
      ++it;
      continue;
    }
    StepAgreement a;
    a.global_step = mode_ == Mode::PsAsync ? globalStep() : clocks_[static_cast<size_t>(it->worker)];
    a.slowest_clock = clocks_[static_cast<size_t>(it->worker)];
    a.finished = true;
    answers.push_back({std::move(it->routing), it->request_id, clocks_[static_cast<size_t>(it->worker)], a});
    it = awaits_.erase(it);
  }
  // Totals of steps every live worker has passed are no longer needed.
  while (!totals_.empty() && totals_.begin()->first <= slowest_clock &&
         std::none_of(pending_.begin(), pending_.end(),
                      [&](const Pending& p) { return p.clock == totals_.begin()->first; })) {
    totals_.erase(totals_.begin());
  }
  return answers;
}

std::vector<StepClocks::Expired> StepClocks::expire(std::chrono::duration<double> timeout) {
  auto expired = std::stable_partition(pending_.begin(), pending_.end(),
                                       [&](const Pending& p) { return Clock::now() - p.since < timeout; });
  std::vector<Expired> out;
  for (auto it = expired; it != pending_.end(); ++it) {
    out.push_back({std::move(it->routing), it->request_id, it->clock, lateFor(it->clock), pausedBy()});
  }
  pending_.erase(expired, pending_.end());
  return out;
}

std::vector<StepClocks::Expired> StepClocks::stalled(std::chrono::duration<double> after) {
  std::vector<Expired> out;
  for (auto& p : pending_) {
    if (p.warned || Clock::now() - p.since < after) continue;
    p.warned = true;
    out.push_back({p.routing, p.request_id, p.clock, lateFor(p.clock), pausedBy()});
  }
  return out;
}

std::optional<int> StepClocks::pausedBy() const {
  return hold_ ? std::optional<int>(hold_->worker) : std::nullopt;
}

// The unfinished workers a step at `clock` may not run ahead of.
std::vector<int> StepClocks::lateFor(uint32_t clock) const {
  const int64_t lead = allowedLead();
  std::vector<int> late;
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (holdsBack(w) && static_cast<int64_t>(clock) - static_cast<int64_t>(clocks_[w]) > lead) {
      late.push_back(static_cast<int>(w));
    }
  }
  return late;
}

WorkerMirror StepClocks::mirror() const {
  WorkerMirror m;
  m.has_clocks = true;
  m.clocks = clocks_;
  m.done = done_;
  m.lost = lost_;
  m.holds_grant = holds_grant_;
  m.granted = granted_;
  m.reported = reported_;
  m.max_staleness = max_staleness_;
  return m;
}

void StepClocks::adopt(const WorkerMirror& m) {
  if (!m.has_clocks || m.clocks.size() != clocks_.size()) return;
  clocks_ = m.clocks;
  done_ = m.done;
  lost_ = m.lost;
  holds_grant_ = m.holds_grant;
  granted_ = m.granted;
  reported_ = m.reported;
  max_staleness_ = m.max_staleness;
  adopted_ = true;
}

bool StepClocks::isWaiting(int worker) const {
  // A chief whose hold is not answered yet waits here too, however long the others' steps take.
  return std::any_of(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.worker == worker; }) ||
         std::any_of(awaits_.begin(), awaits_.end(), [&](const Await& a) { return a.worker == worker; }) ||
         (hold_ && hold_->worker == worker && !hold_->answered);
}

}  // namespace tandem::ps
