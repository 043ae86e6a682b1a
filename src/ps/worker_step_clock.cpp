// A worker's side of the step clocks: its report of each step to the
// keepers (ps 0, and ps 1 with --ps-replicas 2), the agreement that answers
// it, and the chief's waits on the others (its last step, a checkpoint's
// hold). The keepers' side is StepClocks.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "obs/timeline.hpp"
#include "ps/messages.hpp"
#include "ps/worker.hpp"

namespace tandem::ps {

StepAgreement Worker::reportStep(int64_t finished, const StepReport& report, Deadline deadline) {
  ReportTickets clock = sendReport(finished, report);
  return awaitReport(clock, finished, deadline);
}

ReportTickets Worker::sendReport(int64_t finished, const StepReport& report) {
  // Every keeper hears every report, so that either can answer the next.
  ReportTickets tickets;
  tickets.payload = encode(report);
  for (int keeper = 0; keeper < std::min(servers(), options_.layout.replicas()); ++keeper) {
    if (!client_->lost(keeper)) tickets.by_keeper.emplace_back(keeper, sendReportTo(keeper, finished, tickets.payload));
  }
  if (tickets.by_keeper.empty()) {
    // Both lost: a replacement brought up may answer; else the request to ps 0 fails, naming it.
    const int keeper = std::max(0, liveKeeper());
    tickets.by_keeper.emplace_back(keeper, sendReportTo(keeper, finished, tickets.payload));
  }
  return tickets;
}

Ticket Worker::sendReportTo(int keeper, int64_t finished, const std::vector<char>& payload) {
  return client_->send(keeper, {.type = msg::kClock, .clock = static_cast<uint32_t>(finished)},
                       net::copyPayload(payload));
}

StepAgreement Worker::awaitReport(ReportTickets& clock, int64_t finished, Deadline deadline) {
  const std::string what = fmt::format("the end of step {}", finished - 1);
  for (size_t k = 0; k < clock.by_keeper.size(); ++k) {
    auto& [server, ticket] = clock.by_keeper[k];
    net::Frame reply;
    try {
      // Held by a checkpoint's pause, the answer may wait for this step's
      // pushes: one whose primary died since goes to its backup meanwhile.
      reply = ticket.wait(deadline, what, [this] { repushPastLostPrimaries(); });
    } catch (const PeerError&) {
      if (!failOver(server, SIZE_MAX)) throw;
      // A keeper alive answers: it heard this report too, or (a
      // replacement this worker just turned to) is told it now.
      const bool asked = std::any_of(clock.by_keeper.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                                     clock.by_keeper.end(), [&](const auto& t) { return !client_->lost(t.first); });
      const int keeper = liveKeeper();
      if (!asked && keeper >= 0) clock.by_keeper.emplace_back(keeper, sendReportTo(keeper, finished, clock.payload));
      continue;
    }
    // --timeline: until every worker reported (the keeper's barrier) and the answer crossed back.
    if (obs::Timeline* timeline = options_.timeline) {
      const Ticket::Times t = ticket.times();
      if (t.replied_us != 0) {
        timeline->span(fmt::format("end-of-step agreement at ps {}", server), obs::Lane::kComm, t.queued_us,
                       t.replied_us, {{"step", finished - 1}});
      }
    }
    return decodeStepAgreement(reply.bytes(), options_.servers[static_cast<size_t>(server)].name);
  }
  throw PeerError(fmt::format("no server keeps the step clocks any more (asked for {})", what));
}

StepAgreement Worker::awaitWorkers(int64_t step, Deadline deadline) {
  const auto [keeper, reply] = askClockKeeper({.type = msg::kAwaitWorkers, .clock = static_cast<uint32_t>(step)},
                                              deadline, "the other workers' last steps");
  return decodeStepAgreement(reply.bytes(), options_.servers[static_cast<size_t>(keeper)].name);
}

SnapshotPoint Worker::holdForSnapshot(Deadline deadline) {
  const auto [keeper, reply] =
      askClockKeeper({.type = msg::kHold}, deadline, "the other workers to pause for a consistent checkpoint");
  // The servers check the clock count against the cluster's when it comes back.
  return decodeSnapshotPoint(reply.bytes(), 0, options_.servers[static_cast<size_t>(keeper)].name);
}

void Worker::releaseSnapshot(Deadline deadline) {
  askClockKeeper({.type = msg::kRelease}, deadline, "the end of the hold");
}

}  // namespace tandem::ps
