#pragma once
// Ps 0's record of how many steps each worker has finished: the sync
// barrier, the bounded-staleness (SSP) bound, and the loss and stop flag a
// step ends with. Pure bookkeeping, no I/O: the server sends the replies
// this returns. Torch-free; single-threaded (the server's I/O thread).
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "ps/protocol.hpp"

namespace tandem::ps {

class StepClocks {
 public:
  // Every worker's clock starts at `start_step` (a resumed run's first step).
  StepClocks(Mode mode, int staleness, int workers, uint32_t start_step);

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
  };

  // Worker `worker` finished step `clock` (its previous clock + 1, else
  // InputError naming both); its request waits until release() frees it.
  void report(int worker, uint32_t clock, const StepReport& report, std::string routing, uint64_t request_id);
  // A finished worker holds nobody back any more.
  void finish(int worker);
  // Requests that may be answered now: sync once every live worker reached
  // the clock, SSP once the slowest is within the staleness, async at once.
  std::vector<Answer> release();
  // Requests held longer than `timeout`, with who holds them up.
  std::vector<Expired> expire(std::chrono::duration<double> timeout);

  bool isWaiting(int worker) const;
  bool done(int worker) const { return done_[static_cast<size_t>(worker)]; }
  uint32_t clockOf(int worker) const { return clocks_[static_cast<size_t>(worker)]; }
  // The fewest steps any unfinished worker has finished.
  uint32_t slowest() const;
  // The furthest a worker was allowed to start ahead of the slowest.
  uint32_t maxStaleness() const { return max_staleness_; }

 private:
  struct Pending {
    std::string routing;
    uint64_t request_id = 0;
    int worker = 0;
    uint32_t clock = 0;
    StepReport report;
    Clock::time_point since = Clock::now();
  };
  struct Totals {
    double loss_sum = 0;
    int reports = 0;
    double slowest = 0;
    bool stop = false;
  };
  int64_t allowedLead() const;

  Mode mode_;
  int staleness_;
  std::vector<uint32_t> clocks_;
  std::vector<bool> done_;
  std::vector<Pending> pending_;
  std::map<uint32_t, Totals> totals_;  // sync: by step
  uint32_t max_staleness_ = 0;
};

}  // namespace tandem::ps
