// cluster/job_start: what a task that restarts itself in place hands to its
// next process (TANDEM_RESTART), and how a restarted task's startup wait is
// bounded by it.
#include "cluster/job_start.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace tandem::cluster {
namespace {

TEST(JobStart, TheNextProcessReplacesThisStartAndWaitsUntilTheDeadline) {
  JobStart failed;
  failed.generation = 0xfedcba9876543210;  // above INT64_MAX: read back whole
  failed.restarts = 2;
  const auto before = std::chrono::system_clock::now();
  const std::string text = restartEnvironment(failed, 30);
  JobStart next;
  parseRestartEnvironment(text, next);
  EXPECT_EQ(next.replaces, 0xfedcba9876543210u) << text;
  EXPECT_EQ(next.restarts, 3) << text;
  ASSERT_TRUE(next.wait_until.has_value()) << text;
  const double wait = std::chrono::duration<double>(*next.wait_until - before).count();
  EXPECT_GE(wait, 29.9) << text;
  EXPECT_LE(wait, 31.0) << text;
  EXPECT_EQ(next.generation, 0u) << "the generation is the next chief's to choose";

  // A process that failed before it joined replaces what its own start replaced.
  JobStart unjoined;
  unjoined.replaces = 0x77;
  JobStart after;
  parseRestartEnvironment(restartEnvironment(unjoined, 5), after);
  EXPECT_EQ(after.replaces, 0x77u);
}

// launch marks a live job's replacement: it joins the running job.
TEST(JobStart, AReplacementInARunningLiveJobKnowsItJoins) {
  JobStart first;
  EXPECT_FALSE(first.joins_running);
  JobStart replacement;
  parseRestartEnvironment("joins_running=1", replacement);
  EXPECT_TRUE(replacement.joins_running);
  EXPECT_EQ(replacement.replaces, 0u) << "it replaces a task, not the job's start";
  EXPECT_FALSE(replacement.wait_until.has_value());
}

TEST(JobStart, AMalformedVariableIsRefusedNamingTheItem) {
  for (const char* bad : {"replaces=xyz", "restarts=", "until_ms=12abc", "colour=3", "restarts", "joins_running=yes"}) {
    JobStart start;
    try {
      parseRestartEnvironment(bad, start);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("TANDEM_RESTART"), std::string::npos) << e.what();
    }
  }
}

TEST(JobStart, GenerationsAreNonZeroAndDiffer) {
  const uint64_t a = newGeneration(), b = newGeneration();
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(generationText(0xa1), "00000000000000a1");
  EXPECT_EQ(parseGeneration(generationText(a)), a);
  EXPECT_EQ(parseGeneration("not hex"), 0u);
}

}  // namespace
}  // namespace tandem::cluster
