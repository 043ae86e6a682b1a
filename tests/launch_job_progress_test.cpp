#include "launch/job_progress.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "obs/progress.hpp"

namespace tandem::launch {
namespace {

std::string record(int64_t step, int64_t total, double own_rate) {
  return std::string(obs::kProgressRecordPrefix) +
         fmt::format(R"({{"step":{},"total":{},"loss":0.5,"samples_per_sec":0,"worker_samples_per_sec":{}}})", step,
                     total, own_rate);
}

TEST(JobProgressTest, FoldsEveryWorkersRecordsIntoOneLine) {
  JobProgress progress(/*live=*/true);
  EXPECT_EQ(progress.statusLine(), "");
  EXPECT_EQ(progress.onLine("worker 0", record(10, 100, 300)), "");
  EXPECT_EQ(progress.onLine("worker 1", record(12, 100, 200)), "");
  const std::string line = progress.statusLine();
  for (const char* needle : {"job: step 12/100 (12%)", "2 worker(s)", "500 samples/s", "slowest: worker 1 (200"}) {
    EXPECT_NE(line.find(needle), std::string::npos) << needle << " not in " << line;
  }
  // Everything else is relayed as it was.
  EXPECT_FALSE(progress.onLine("worker 0", "[info] resumed from x"));
  EXPECT_FALSE(progress.onLine("worker 0", "@tandem-progress not json"));
}

TEST(JobProgressTest, PlainModeWritesALineWhenDueAndAtTheEnd) {
  JobProgress progress(/*live=*/false, /*plain_interval_s=*/3600);
  auto first = progress.onLine("worker 0", record(1, 50, 100));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->rfind("[launch] job: step 1/50", 0), 0u) << *first;
  EXPECT_EQ(progress.onLine("worker 0", record(2, 50, 100)), "");  // not due for an hour
  auto last = progress.onLine("worker 0", record(50, 50, 100));
  ASSERT_TRUE(last);
  EXPECT_NE(last->find("step 50/50 (100%)"), std::string::npos) << *last;
  EXPECT_EQ(progress.statusLine(), "");  // not live
}

// A worker whose process is gone while the job goes on (a live job) no
// longer counts: the line names the workers left, the slowest among them,
// and the end is written when they get there.
TEST(JobProgressTest, AForgottenWorkerNoLongerCounts) {
  JobProgress progress(/*live=*/false, /*plain_interval_s=*/3600);
  ASSERT_TRUE(progress.onLine("worker 0", record(10, 20, 300)));
  EXPECT_EQ(progress.onLine("worker 2", record(10, 20, 50)), "");
  EXPECT_NE(progress.render().find("slowest: worker 2"), std::string::npos) << progress.render();
  progress.forget("worker 2");
  const std::string line = progress.render();
  EXPECT_NE(line.find("1 worker(s)"), std::string::npos) << line;
  EXPECT_EQ(line.find("worker 2"), std::string::npos) << line;
  const auto end = progress.onLine("worker 0", record(20, 20, 300));
  ASSERT_TRUE(end) << "the end was never written: the dead worker still held it back";
  EXPECT_NE(end->find("step 20/20 (100%)"), std::string::npos) << *end;
}

}  // namespace
}  // namespace tandem::launch
