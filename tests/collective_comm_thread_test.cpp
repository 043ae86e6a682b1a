#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "collective/comm_thread.hpp"
#include "core/error.hpp"

namespace tandem::collective {
namespace {

using namespace std::chrono_literals;

TEST(CommThread, RunsJobsInSubmissionOrderOffTheCallerThread) {
  std::vector<int> order;
  std::atomic<bool> on_caller_thread{false};
  const auto caller = std::this_thread::get_id();
  CommThread thread;
  CommHandle last;
  for (int i = 0; i < 100; ++i) {
    last = thread.submit([&, i] {
      if (std::this_thread::get_id() == caller) on_caller_thread = true;
      // Later jobs finish faster, so out-of-order execution would show.
      if (i < 3) std::this_thread::sleep_for(5ms);
      order.push_back(i);
    });
  }
  last.wait(Deadline::after(10s), "job 99");
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_FALSE(on_caller_thread);
}

TEST(CommThread, RethrowsTheJobsExceptionAndKeepsRunning) {
  CommThread thread;
  auto failing = thread.submit([] { throw PeerError("rank 2 at 10.0.0.3:4000 closed the connection"); });
  auto next = thread.submit([] {});
  try {
    failing.wait(Deadline::after(10s), "allreduce");
    FAIL() << "no throw";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 at 10.0.0.3:4000"), std::string::npos) << e.what();
  }
  // The stored exception is rethrown to every waiter, not consumed by the first.
  EXPECT_THROW(failing.wait(Deadline::after(10s), "allreduce"), PeerError);
  EXPECT_NO_THROW(next.wait(Deadline::after(10s), "next"));
  EXPECT_TRUE(failing.done());
}

TEST(CommThread, NonTandemExceptionsPropagateUnchanged) {
  CommThread thread;
  auto handle = thread.submit([] { throw std::out_of_range("bucket 7"); });
  EXPECT_THROW(handle.wait(Deadline::after(10s), "job"), std::out_of_range);
}

TEST(CommThread, DeadlinePassingThrowsPeerErrorNamingTheJob) {
  std::promise<void> release;
  auto released = release.get_future().share();
  CommThread thread;
  auto handle = thread.submit([released] { released.wait(); });
  EXPECT_FALSE(handle.done());
  const auto start = Clock::now();
  try {
    handle.wait(Deadline::after(100ms), "allreduce of bucket 3");
    FAIL() << "no throw";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    // The budget is rounded to the millisecond: 0.1s, or 0.099s on a busy machine.
    EXPECT_EQ(what.rfind("allreduce of bucket 3 did not finish within 0.", 0), 0u) << what;
    EXPECT_EQ(what.back(), 's') << what;
  }
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 95ms);
  EXPECT_LT(waited, 5s);
  release.set_value();
  // The job itself was not abandoned: a later wait sees it finish.
  EXPECT_NO_THROW(handle.wait(Deadline::after(10s), "allreduce of bucket 3"));
  EXPECT_TRUE(handle.done());
}

TEST(CommThread, ExpiredDeadlineStillReturnsFinishedJob) {
  CommThread thread;
  auto handle = thread.submit([] {});
  handle.wait(Deadline::after(10s), "first");
  EXPECT_NO_THROW(handle.wait(Deadline(Clock::now() - 1s), "already done"));
}

TEST(CommThread, DestructorRunsQueuedJobsBeforeJoining) {
  std::atomic<int> ran{0};
  {
    CommThread thread;
    for (int i = 0; i < 20; ++i) {
      thread.submit([&] {
        std::this_thread::sleep_for(2ms);
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 20);
}

TEST(CommThread, DefaultHandleIsDone) {
  CommHandle handle;
  EXPECT_TRUE(handle.done());
  EXPECT_NO_THROW(handle.wait(Deadline::after(0ms), "nothing"));
}

}  // namespace
}  // namespace tandem::collective
