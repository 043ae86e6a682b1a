#pragma once
// Ps 0's record of how many steps each worker has finished: the sync
// barrier, the bounded-staleness (SSP) bound, and the loss and stop flag a
// step ends with. Pure bookkeeping, no I/O: the server sends the replies
// this returns. Torch-free; single-threaded (the server's I/O thread).
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "ps/protocol.hpp"

namespace tandem::ps {

class StepClocks {
 public:
  // Every worker's clock starts at `start_step` (a resumed run's first step).
  // Async: the job makes `total_steps` whole-model updates in all; every
  // worker starts one step unasked and is granted each further one while
  // the total allows, so a fast worker takes on a slow one's share.
  StepClocks(Mode mode, int staleness, int workers, uint32_t start_step, uint64_t total_steps = 0);

  // A held "may I go on" request, released as a reply or failed.
  struct Answer {
    std::string routing;
    uint64_t request_id = 0;
    uint32_t clock = 0;
    StepAgreement agreement;
  };
  struct Expired {
    std::string routing;
    uint64_t request_id = 0;
    uint32_t clock = 0;
    std::vector<int> late;  // the workers holding it up
    std::optional<int> paused_by{};  // the chief whose checkpoint's hold holds it, if any
  };

  // Worker `worker` finished step `clock` (its previous clock + 1, else
  // InputError naming both); its request waits until release() frees it.
  void report(int worker, uint32_t clock, const StepReport& report, std::string routing, uint64_t request_id);
  // A finished worker holds nobody back any more.
  void finish(int worker);
  // A worker given up on (silent past the peer timeout): a step it was
  // granted goes back to the others, and nobody waits for it to finish. It
  // still holds back sync steps, which then fail by timeout; the SSP bound
  // holds against the live workers only.
  void lose(int worker);
  // A new process takes over `worker` (async and SSP): it continues that
  // worker's clock, a step granted to the one it replaces goes back to the
  // job, and like every worker it starts one step unasked (async). False
  // when no step is left to grant it: it is to make none.
  bool rejoin(int worker);
  // Sync: a new process takes over `worker`, which died, at a step
  // boundary. Its clock becomes the step every other live worker has
  // finished (the one before, while some are still in the next). Its next
  // report, of the step after, stands for the one it did not push: it is
  // in no step's loss. Returns that clock: `given` when the first keeper
  // chose it (--ps-replicas 2), else worked out here.
  uint32_t joinSync(int worker, std::optional<uint32_t> given = std::nullopt);
  // Worker `worker` waits until every other worker has finished or been
  // lost (the chief, before its final checkpoint); answered by release().
  void awaitOthers(int worker, std::string routing, uint64_t request_id);
  // Async and SSP checkpoints: `worker` (the chief) asks for a hold. Every
  // other worker's next report is held (not answered) until unhold(); once
  // each of them waits or is done or lost, takeHoldAnswer() has the point.
  // Throws InputError in sync mode (a sync step is a snapshot already) or
  // when a hold is in place.
  void hold(int worker, std::string routing, uint64_t request_id);
  // Ends `worker`'s hold; its next report, goodbye or loss ends it too.
  void unhold(int worker);
  struct HoldAnswer {
    std::string routing;
    uint64_t request_id = 0;
    SnapshotPoint point;
  };
  // The hold's answer, once, when every other worker waits.
  std::optional<HoldAnswer> takeHoldAnswer();

  // Requests that may be answered now: sync once every live worker reached
  // the clock, SSP once the slowest is within the staleness, async at once;
  // awaits once everyone else is finished or lost.
  std::vector<Answer> release();
  // Requests held longer than `timeout`, with who holds them up.
  std::vector<Expired> expire(std::chrono::duration<double> timeout);
  // Requests held longer than `after` and not reported before, with who
  // holds them up; they stay held (a warning, not a failure).
  std::vector<Expired> stalled(std::chrono::duration<double> after);

  // Async and SSP replicas: this record as a replacement server mirrors
  // it (ps-mirror), and the replacement taking it on. Once adopted, a
  // worker's report of the step it last reported is that report asked
  // again (its keeper died before answering), not a new step; and one
  // further ahead counts the reports between as answered there (the
  // mirror lags its holder by what was still on the way when it died).
  WorkerMirror mirror() const;
  void adopt(const WorkerMirror& mirror);

  bool isWaiting(int worker) const;
  bool done(int worker) const { return done_[static_cast<size_t>(worker)]; }
  uint32_t clockOf(int worker) const { return clocks_[static_cast<size_t>(worker)]; }
  // Steps each worker index has finished since the start step (a replaced
  // worker's include its predecessor's).
  std::vector<uint32_t> stepsByWorker() const;
  // The fewest steps any unfinished worker has finished.
  uint32_t slowest() const;
  // The furthest a worker was allowed to start ahead of the slowest.
  uint32_t maxStaleness() const { return max_staleness_; }
  // Whole-model updates so far: async, every worker's reported steps added
  // to the start step; otherwise the furthest clock (each step is one).
  uint64_t globalStep() const;

 private:
  struct Pending {
    std::string routing;
    uint64_t request_id = 0;
    int worker = 0;
    uint32_t clock = 0;
    StepReport report;
    Clock::time_point since = Clock::now();
    bool warned = false;
    bool again = false;  // asked again after a failover: counted already
  };
  std::vector<int> lateFor(uint32_t clock) const;
  // Whether a step may have to wait for `worker`: it has not finished and,
  // outside sync mode, has not been given up on.
  bool holdsBack(size_t worker) const { return !done_[worker] && !(lost_[worker] && mode_ != Mode::PsSync); }
  struct Totals {
    double loss_sum = 0;
    int reports = 0;
    double slowest = 0;
    bool stop = false;
    bool checkpoint = false;
    uint32_t rejoining_server = kNoServer;  // named by the chief's report
  };
  int64_t allowedLead() const;

  struct Await {
    std::string routing;
    uint64_t request_id = 0;
    int worker = 0;
  };
  void returnGrant(int worker);
  std::optional<int> pausedBy() const;
  struct Hold {
    int worker = 0;
    std::string routing;
    uint64_t request_id = 0;
    bool answered = false;
  };
  std::optional<Hold> hold_;
  bool adopted_ = false;  // mirrored from another keeper (adopt)

  Mode mode_;
  int staleness_;
  std::vector<uint32_t> clocks_;
  std::vector<bool> done_;
  std::vector<bool> lost_;
  std::vector<bool> joining_;      // sync: its next report is its join, not a step it pushed
  std::vector<bool> holds_grant_;  // async: granted a step it has not reported yet
  uint64_t start_step_ = 0;
  uint64_t total_steps_ = 0;
  uint64_t reported_ = 0;          // steps reported this session, every worker together
  uint64_t granted_ = 0;           // async: steps handed out, from the start step
  std::vector<Pending> pending_;
  std::vector<Await> awaits_;
  std::map<uint32_t, Totals> totals_;  // sync: by step
  uint32_t max_staleness_ = 0;
};

}  // namespace tandem::ps
