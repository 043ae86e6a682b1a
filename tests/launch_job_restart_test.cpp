#include "launch/job_restart.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launch/job_progress.hpp"
#include "obs/progress.hpp"
#include "core/error.hpp"
#include "support/process.hpp"

namespace tandem::launch {
namespace {

using Args = std::vector<std::string>;

TEST(JobRestartTest, ARestartFromACheckpointDropsOverwriteAndResume) {
  const Args given{"--model", "cnn", "--overwrite", "--resume", "old.ckpt", "--out", "r", "--resume=x.ckpt"};
  EXPECT_EQ(restartArguments(given, true), (Args{"--model", "cnn", "--out", "r"}));
  // Without a checkpoint in OUT the job starts again the way it first did.
  EXPECT_EQ(restartArguments(given, false), given);
}

TEST(JobRestartTest, LostUpdatesCountFromTheCheckpointOrTheStart) {
  RestartRecord record;
  record.restart = 1;
  record.max_restarts = 2;
  record.failure = "ps 0 (pid 7) was killed by SIGKILL";
  record.resume_step = 40;
  record.last_step = 57;
  EXPECT_EQ(record.lostUpdates(), 17);
  EXPECT_EQ(record.describe(),
            "restart 1 of 2: ps 0 (pid 7) was killed by SIGKILL; every task continues from the checkpoint at step "
            "40 (17 update(s) since it are lost)");
  const auto json = record.toJson();
  EXPECT_EQ(json["lost_updates"], 17);
  EXPECT_EQ(json["resume_step"], 40);
  EXPECT_EQ(json["from_checkpoint"], true);
  // When: Unix seconds, as the trainers' own records beside it.
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(json["time"].get<double>(), now, 60.0);
  record.replaced = "worker 2";
  EXPECT_EQ(record.toJson()["time"], json["time"]);
  record.replaced.clear();

  record.resume_step.reset();
  EXPECT_EQ(record.lostUpdates(), 57);
  EXPECT_NE(record.describe().find("no checkpoint yet"), std::string::npos) << record.describe();
  record.last_step.reset();
  EXPECT_FALSE(record.lostUpdates().has_value());
  EXPECT_TRUE(record.toJson()["lost_updates"].is_null());
}

TEST(JobRestartTest, RecordsAppendOneLineEach) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "run" / "restarts.jsonl").string();
  RestartRecord record;
  record.failure = "worker 1 exited with status 1";
  for (int i = 1; i <= 2; ++i) {
    record.restart = i;
    appendRestartRecord(path, record);
  }
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_EQ(nlohmann::json::parse(line)["restart"], lines);
  }
  EXPECT_EQ(lines, 2);
  EXPECT_THROW(appendRestartRecord((dir.path() / "run" / "restarts.jsonl" / "x").string(), record), Error);
}

TEST(JobRestartTest, JobProgressKnowsTheFurthestStepAndForgetsItOnRestart) {
  JobProgress progress(/*live=*/true);
  EXPECT_FALSE(progress.latestStep().has_value());
  auto record = [](int step) {
    return std::string(obs::kProgressRecordPrefix) + R"({"step":)" + std::to_string(step) +
           R"(,"total":100,"loss":0.5,"samples_per_sec":0,"worker_samples_per_sec":1})";
  };
  progress.onLine("worker 0", record(12));
  progress.onLine("worker 1", record(15));
  progress.onLine("worker 0", record(14));
  EXPECT_EQ(progress.latestStep(), 15);
  progress.restart();
  EXPECT_FALSE(progress.latestStep().has_value());
  EXPECT_EQ(progress.statusLine(), "");
}

}  // namespace
}  // namespace tandem::launch
