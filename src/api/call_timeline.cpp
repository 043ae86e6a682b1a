// hvd.start_timeline and stop_timeline: every collective the API runs, and
// every DistributedOptimizer bucket, as spans of Tandem's trace format
// (obs/timeline.hpp; chrome://tracing and Perfetto read it). Rank 0 writes
// it, as Horovod's coordinator writes Horovod's.
#include <fmt/format.h>

#include <array>
#include <utility>

#include "api/job.hpp"
#include "core/error.hpp"
#include "tandem/collectives.hpp"

namespace tandem {
namespace api {

std::function<void()> traced(Job& job, const std::function<std::string()>& name, std::function<void()> body) {
  std::shared_ptr<obs::Timeline> timeline;
  {
    std::lock_guard lock(job.timeline_mutex);
    timeline = job.timeline;
  }
  if (!timeline) return body;
  const int64_t queued_us = obs::Timeline::nowUs();
  return [timeline, what = name(), body = std::move(body), queued_us] {
    const int64_t start_us = obs::Timeline::nowUs();
    timeline->span(what, obs::Lane::kLoop, queued_us, start_us, {{"phase", "queued"}});
    try {
      body();
    } catch (const std::exception& e) {
      timeline->span(what, obs::Lane::kComm, start_us, obs::Timeline::nowUs(), {{"error", e.what()}});
      throw;
    }
    timeline->span(what, obs::Lane::kComm, start_us, obs::Timeline::nowUs());
  };
}

void stopTimeline(Job& job) {
  std::shared_ptr<obs::Timeline> timeline;
  {
    std::lock_guard lock(job.timeline_mutex);
    timeline = std::exchange(job.timeline, nullptr);
  }
  // Spans of calls still queued land on it and are dropped with it.
  if (timeline) timeline->write();
}

}  // namespace api

void start_timeline(const std::string& file_path, bool mark_cycles) {
  (void)mark_cycles;  // Tandem has no background cycles to mark
  if (!api::current()) throw InputError("start_timeline: Tandem has not been initialized; call init() first");
  if (file_path.empty()) throw InputError("start_timeline: the file path is empty");
  api::Job& job = *api::current();
  api::stopTimeline(job);  // as Horovod: a second start records into the new file
  if (job.rank() != 0) return;
  auto timeline = std::make_shared<obs::Timeline>(
      file_path, "rank 0", 0, std::array<std::string, 3>{"queued for the communication thread", "collectives", ""});
  std::lock_guard lock(job.timeline_mutex);
  job.timeline = std::move(timeline);
}

void stop_timeline() {
  if (!api::current()) throw InputError("stop_timeline: Tandem has not been initialized; call init() first");
  api::stopTimeline(*api::current());
}

}  // namespace tandem
