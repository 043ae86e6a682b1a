// ApplyPool: a job that throws must reach the owner as a named error, not
// std::terminate.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ps/apply_pool.hpp"

namespace tandem::ps {
namespace {

using namespace std::chrono_literals;

std::string rethrownMessage(ApplyPool& pool) {
  try {
    pool.rethrowFailure();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ApplyPool, AFailedJobIsRethrownNamingTheJobAndOthersStillRun) {
  std::promise<void> failed;
  std::atomic<int> ran{0};
  {
    ApplyPool pool(2, [&] { failed.set_value(); });
    EXPECT_EQ(rethrownMessage(pool), "") << "nothing failed yet";
    pool.submit("apply of chunk 1 (update 0)", [&] { ++ran; });
    pool.submit("apply of chunk 7 (update 3)", [] { throw std::runtime_error("kernel exploded"); });
    ASSERT_EQ(failed.get_future().wait_for(2s), std::future_status::ready) << "on_failure was not called";
    EXPECT_EQ(rethrownMessage(pool), "apply of chunk 7 (update 3) failed: kernel exploded");
    // The failure stays until the owner acts on it.
    EXPECT_EQ(rethrownMessage(pool), "apply of chunk 7 (update 3) failed: kernel exploded");
    pool.submit("apply of chunk 2 (update 0)", [&] { ++ran; });
  }  // joins after the queued jobs
  EXPECT_EQ(ran.load(), 2);
}

// A job a pull waits for goes ahead of queued ones nobody waits for (a
// backup's applies), behind the awaited ones queued before it.
TEST(ApplyPool, AnAwaitedJobGoesAheadOfOnesNobodyWaitsFor) {
  std::vector<std::string> order;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  {
    ApplyPool pool(1);
    std::promise<void> started;
    pool.submit("blocker", [&] {
      started.set_value();
      released.wait();
    });
    ASSERT_EQ(started.get_future().wait_for(2s), std::future_status::ready);
    pool.submit("backup 1", [&] { order.push_back("backup 1"); }, false);
    pool.submit("awaited 1", [&] { order.push_back("awaited 1"); });
    pool.submit("backup 2", [&] { order.push_back("backup 2"); }, false);
    pool.submit("awaited 2", [&] { order.push_back("awaited 2"); });
    release.set_value();
  }  // joins after the queued jobs
  EXPECT_EQ(order, (std::vector<std::string>{"awaited 1", "awaited 2", "backup 1", "backup 2"}));
}

TEST(ApplyPool, KeepsTheFirstFailureAndNamesNonStandardExceptions) {
  std::atomic<int> failures{0};
  ApplyPool pool(1, [&] { ++failures; });
  std::promise<void> done;
  pool.submit("apply of chunk 4 (update 9)", [] { throw 42; });
  pool.submit("apply of chunk 5 (update 1)", [] { throw std::runtime_error("second"); });
  pool.submit("marker", [&] { done.set_value(); });
  ASSERT_EQ(done.get_future().wait_for(2s), std::future_status::ready);
  EXPECT_EQ(failures.load(), 1) << "on_failure is for the first failure only";
  EXPECT_EQ(rethrownMessage(pool), "apply of chunk 4 (update 9) failed with an exception that is not a std::exception");
}

}  // namespace
}  // namespace tandem::ps
