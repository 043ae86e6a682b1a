#pragma once
// Who trains at the next step boundary: the membership of a job whose
// workers may die, leave or join while it runs. Pure policy: every call
// takes `now`, nothing here sleeps, reads a clock or touches a socket, so a
// test replays any ordering of deaths, arrivals and joins in microseconds.
// The coordinator hosts one Quorum and answers workers from it.
//
// A change goes in rounds. A round opens when a worker arrives at a step
// boundary asking for the next membership (its collective failed, it was
// told a change is pending, or it is a joiner), or when a member falls
// silent. It forms once every live member has arrived, or when the round
// has waited `arrival_timeout` for the rest. While a round is open, a
// member is taken for dead sooner, after `suspect_after` of silence. The new membership is the
// live arrivals, in worker-id order; the highest step among them is where
// the job goes on, and whoever is behind it (joiners included) copies its
// state from the lowest-id worker at that step, not from a file.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem::cluster {

using QuorumTime = std::chrono::steady_clock::time_point;

struct QuorumOptions {
  int min_workers = 1;  // fewer live workers than this stop the job
  int max_workers = 0;  // joiners are admitted up to this size (0: the starting size)
  // A worker silent this long is taken for dead.
  std::chrono::milliseconds heartbeat_timeout{5000};
  // While a round is open (a collective failed, so someone probably died)
  // a member silent this long is taken for dead: a few missed beats, not
  // the whole timeout. 0: the heartbeat timeout.
  std::chrono::milliseconds suspect_after{0};
  // How often each worker's link beats (the quorum itself only reads time).
  std::chrono::milliseconds beat_interval{1000};
  // How long a round waits for a live member that has not come to the step
  // boundary (still stuck in a collective); then it forms without it.
  std::chrono::milliseconds arrival_timeout{120000};
};

// A worker that left the membership, and why, for the log and restarts.jsonl.
struct Departure {
  int worker = 0;
  std::string why;  // "silent for 5.0s", "left", "did not reach the step boundary within 120s"
  bool operator==(const Departure&) const = default;
};

// One generation of the job's membership: a value, replaced whole at a
// step boundary. Ranks are positions in `workers`.
struct Membership {
  int64_t generation = 0;
  std::vector<int> workers;  // worker ids, ascending
  int64_t step = 0;          // the completed steps every member goes on from
  int source = -1;           // the worker the others copy state from; -1: nobody is behind
  std::vector<int> healing;  // members behind `step` (joiners among them), who copy from `source`
  // Members new in this generation; a worker whose restarted process came
  // back before it was taken for dead is in both lists.
  std::vector<int> joined;
  std::vector<Departure> departed;  // workers of the previous generation whose process is gone

  int size() const { return static_cast<int>(workers.size()); }
  // The worker's rank in this generation, or nullopt if it is not a member.
  std::optional<int> rankOf(int worker) const;
  bool operator==(const Membership&) const = default;
};

// What a worker waiting on the quorum learns.
struct QuorumView {
  Membership current;
  bool round_open = false;       // a change is pending: members should come to the next step boundary
  std::vector<int> awaited;      // live members the open round still waits for
  std::optional<std::string> stopped;  // the job cannot go on: why, naming the workers
  bool operator==(const QuorumView&) const = default;
};

// Not thread-safe: the coordinator's thread owns it.
class Quorum {
 public:
  // Workers 0..initial_workers-1 form generation 0 at step `first_step`,
  // each presumed alive at `now`. Throws InputError for options that cannot
  // hold (min_workers above the starting size, max_workers below it).
  Quorum(int initial_workers, int64_t first_step, QuorumOptions options, QuorumTime now);

  // The worker is alive. A heartbeat from a worker the quorum has taken for
  // dead does not bring it back: it must arrive again as a joiner.
  void heartbeat(int worker, QuorumTime now);
  // The worker is at a step boundary with `step` steps done (-1: a fresh
  // joiner with no state) and asks for the membership after `generation`
  // (the last one it knew). Opens a round unless one is open. A joiner
  // beyond max_workers waits without opening one. An arrival counts as a
  // heartbeat.
  void arrive(int worker, int64_t generation, int64_t step, QuorumTime now);
  // The worker departs cleanly (preemption): no round waits for it.
  void leave(int worker, QuorumTime now);

  // Forms the next membership when it can, then says where things stand.
  QuorumView poll(QuorumTime now);

  const Membership& current() const { return current_; }
  const QuorumOptions& options() const { return options_; }

 private:
  struct Seen {
    QuorumTime last{};
    bool dead = false;  // taken for dead or departed: only a new arrival brings it back
    std::string why;
  };
  struct Arrival {
    int64_t step = 0;
    QuorumTime at{};
  };

  bool alive(int worker, QuorumTime now);
  bool anyMemberLost(QuorumTime now);
  bool canAdmitJoiner() const;
  void form(QuorumTime now);

  QuorumOptions options_;
  Membership current_;
  std::map<int, Seen> seen_;
  std::map<int, Arrival> arrivals_;  // this round's, by worker
  std::optional<QuorumTime> round_opened_;
  std::optional<std::string> stopped_;
};

}  // namespace tandem::cluster
