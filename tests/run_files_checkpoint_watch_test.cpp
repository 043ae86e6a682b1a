// The evaluator's policy replayed over the orders a chief writes its run
// directory in, with no file and no clock; then lookAt on a real directory.
#include "train/checkpoint_watch.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "train/run_directory.hpp"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;
using Action = CheckpointWatch::Action;
using namespace std::chrono_literals;

const fs::file_time_type t0{};

RunDirectoryView view(std::optional<fs::path> latest, fs::file_time_type written,
                      std::optional<fs::file_time_type> summary = std::nullopt) {
  return {.latest = std::move(latest), .latest_written = written, .summary_written = summary};
}

TEST(CheckpointWatch, EvaluatesEachNewCheckpointOnceAndEndsAfterTheFinalOne) {
  CheckpointWatch watch;
  EXPECT_EQ(watch.next(view(std::nullopt, t0)), Action::kWait) << "no checkpoint yet";
  const auto first = view("out/checkpoints/step-40.ckpt", t0 + 1s);
  ASSERT_EQ(watch.next(first), Action::kEvaluate);
  watch.evaluated(first);
  EXPECT_EQ(watch.next(first), Action::kWait) << "evaluated twice";
  // Two written while it evaluated: only the newest is taken.
  const auto third = view("out/checkpoints/step-120.ckpt", t0 + 3s);
  ASSERT_EQ(watch.next(third), Action::kEvaluate);
  watch.evaluated(third);
  // The final checkpoint, then the summary.
  const auto last = view("out/checkpoint.ckpt", t0 + 4s);
  ASSERT_EQ(watch.next(last), Action::kEvaluate);
  watch.evaluated(last);
  EXPECT_EQ(watch.next(last), Action::kWait) << "ended before the chief's summary";
  EXPECT_EQ(watch.next(view("out/checkpoint.ckpt", t0 + 4s, t0 + 5s)), Action::kEnd);
  EXPECT_EQ(watch.evaluations(), 3);
}

TEST(CheckpointWatch, APreviousRunsSummaryDoesNotEndIt) {
  CheckpointWatch watch;
  // The summary is older than the newest checkpoint: it is of a run before.
  const auto resumed = view("out/checkpoints/step-40.ckpt", t0 + 10s, t0 + 2s);
  ASSERT_EQ(watch.next(resumed), Action::kEvaluate);
  watch.evaluated(resumed);
  EXPECT_EQ(watch.next(resumed), Action::kWait);
  EXPECT_EQ(watch.next(view(std::nullopt, t0, t0 + 2s)), Action::kWait) << "a summary with no checkpoint";
  // The same path written again (a new run's final checkpoint) is evaluated again.
  const auto again = view("out/checkpoints/step-40.ckpt", t0 + 20s, t0 + 21s);
  ASSERT_EQ(watch.next(again), Action::kEvaluate);
  watch.evaluated(again);
  EXPECT_EQ(watch.next(again), Action::kEnd);
}

TEST(CheckpointWatch, LookAtReadsTheRunDirectory) {
  const fs::path out = fs::temp_directory_path() / ("tandem-watch-" + std::to_string(::getpid()));
  fs::remove_all(out);
  fs::create_directories(out / "checkpoints");
  EXPECT_FALSE(lookAt(out).latest);
  std::ofstream(out / "checkpoints" / "step-4.ckpt") << "x";
  recordLatest(out, out / "checkpoints" / "step-4.ckpt");
  RunDirectoryView seen = lookAt(out);
  ASSERT_TRUE(seen.latest);
  EXPECT_EQ(*seen.latest, out / "checkpoints" / "step-4.ckpt");
  EXPECT_FALSE(seen.summary_written);
  std::ofstream(out / "summary.json") << "{}";
  fs::last_write_time(out / "summary.json", seen.latest_written + 1s);
  CheckpointWatch watch;
  watch.evaluated(seen);
  EXPECT_EQ(watch.next(lookAt(out)), Action::kEnd);
  fs::remove_all(out);
}

}  // namespace
}  // namespace tandem::train
