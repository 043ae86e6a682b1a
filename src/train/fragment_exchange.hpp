#pragma once
// Streaming DiLoCo's exchanges for one worker (Douillard et al. 2025), on
// FragmentSchedule's timetable. An exchange pushes one fragment's outer
// gradients (global - local, chunk by chunk) and reports to ps 0, then
// training goes on; `delay` steps later the servers' new global values are
// taken in, mixed into the worker's own as mix * local + (1 - mix) * global,
// and ps 0's agreement (loss, stop) is read. The last step, or a stop,
// exchanges every fragment and replaces the local values: every worker ends
// on the global model. A chunk's servers count its own exchanges, so its
// clock is its fragment's.
#include <optional>
#include <vector>

#include "core/push_format.hpp"
#include "ps/worker.hpp"
#include "ps/protocol.hpp"
#include "train/fragment_schedule.hpp"
#include "train/ps_setup.hpp"

namespace tandem::train {

class FragmentExchange {
 public:
  // `link` (one of `workers`' connections, which outlives the exchange)
  // was set up with chunkClocks()' clocks, and its model holds the global
  // model. Pushes travel as `format` (the servers' pushFormat), pulls as
  // its wire.
  FragmentExchange(const FragmentSchedule& schedule, double mix, PsConnection& link, int workers,
                   const PushFormat& format, int64_t start_step);

  // Chunk c's servers' clock at `start_step` (PsSetup::chunk_clock).
  static std::function<int64_t(size_t)> chunkClocks(const FragmentSchedule& schedule, int64_t start_step);

  struct Outcome {
    SyncTimes times;
    std::optional<ps::StepAgreement> agreement;  // when an exchange was merged
    bool everything = false;                     // every fragment was exchanged: the replicas agree
    bool reported = false;                       // a report went to ps 0
  };
  // After step `step` (counted from 1) of the run: `last` for its last step.
  // `report` goes to ps 0 with an exchange started now.
  Outcome afterStep(int64_t step, bool last, const ps::StepReport& report);

  int64_t exchanges() const { return exchanges_; }
  int64_t pushedBytes() const { return pushed_bytes_; }
  int64_t pulledBytes() const { return pulled_bytes_; }

 private:
  struct InFlight {
    std::vector<size_t> chunks;
    std::vector<int> fragments;
    int64_t merge_after = 0;
    double mix = 0;
    ps::ReportTickets report;
    int64_t finished = 0;  // ps 0's clock after it
  };
  void begin(const std::vector<int>& fragments, int64_t merge_after, double mix, const ps::StepReport& report);
  ps::StepAgreement merge(SyncTimes& times);
  // Chunk c's local values, from wherever the model lives, into `out`.
  void gatherLocal(size_t c, float* out) const;

  FragmentSchedule schedule_;
  double mix_;
  PushFormat format_;
  PsConnection& link_;
  int workers_;
  ps::Worker& worker_;         // link_'s protocol
  ChunkedParameters& model_;   // link_'s model, by chunk
  std::vector<float> global_;  // key order: the global model as last merged
  std::vector<float> outer_;   // key order: pushed outer gradients, kept until taken
  std::vector<int64_t> clock_;  // by fragment
  int64_t reports_ = 0;         // ps 0's clock
  std::optional<InFlight> in_flight_;
  int64_t exchanges_ = 0;
  int64_t pushed_bytes_ = 0;
  int64_t pulled_bytes_ = 0;
};

}  // namespace tandem::train
