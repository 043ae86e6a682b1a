// `tandem launch --max-restarts`: a killed parameter server brings the job
// down and back up, and every task continues from the newest checkpoint;
// a killed worker, chief included, is started again alone.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using testing::readFile;
using testing::TempDir;

// Synthetic-data arguments with launch's own progress records (which tell
// it how far the job got before a failure) instead of plain lines.
std::string restartArgs(const std::string& out, const std::string& extra) {
  std::string args = testing::syntheticTrainArgs("mlp", 16, out, extra);
  const std::string plain = "--progress plain ";
  args.erase(args.find(plain), plain.size());
  return args;
}

// Starts `launch_args`, kills ps 0 with SIGKILL once OUT has a step
// checkpoint, and returns launch's exit code.
int killServerAfterFirstCheckpoint(const TempDir& dir, const std::string& out, const std::string& launch_args) {
  const pid_t pid = testing::spawnTandem(launch_args, dir.str("log"));
  if (!testing::waitForOutput(pid, fs::path(out) / "checkpoints" / "latest", std::chrono::seconds(120))) return -2;
  testing::killTasks(out, "ps", "0");
  return testing::waitForExit(pid, std::chrono::seconds(180));
}

// Launches 1 PS and 3 workers with one restart and `extra`, kills worker 2
// with SIGKILL once it has logged a step, and returns launch's exit code
// (-2: worker 2 never logged one).
int killWorkerTwoOnceItTrains(const TempDir& dir, const std::string& run, const std::string& extra) {
  const pid_t pid = testing::spawnTandem(
      "launch --ps 1 --workers 3 --max-restarts 1 -- " + restartArgs(run, extra + " --debug-step-delay-ms 20"),
      dir.str("log"));
  const fs::path metrics = fs::path(run) / "workers" / "worker-2" / "metrics.jsonl";
  if (!testing::waitForOutput(pid, metrics, std::chrono::seconds(120))) return -2;
  testing::killTasks(run, "worker", "2");
  return testing::waitForExit(pid, std::chrono::seconds(180));
}

TEST(LaunchRestart, SyncJobSurvivesAKilledServerAndEndsWhereAnUninterruptedRunDoes) {
  TempDir dir;
  const std::string run = dir.str("run"), clean = dir.str("clean");
  const std::string extra = "--max-steps 90 --checkpoint-every 20 --seed 3 --debug-step-delay-ms 25 --ps-chunk-mb 0.02";
  const int code =
      killServerAfterFirstCheckpoint(dir, run, "launch --ps 2 --workers 2 --max-restarts 1 -- " + restartArgs(run, extra));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("restart 1 of 1: ps 0"), std::string::npos) << log;
  EXPECT_NE(log.find("SIGKILL"), std::string::npos) << log;
  const auto records = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(records.size(), 1u) << log;
  const int resumed = records[0]["resume_step"].get<int>();
  EXPECT_TRUE(records[0]["from_checkpoint"].get<bool>()) << records[0];
  EXPECT_TRUE(resumed == 20 || resumed == 40 || resumed == 60) << records[0];
  // The steps trained after that checkpoint and before the kill: known (not
  // null), and no more than the run had left.
  ASSERT_TRUE(records[0]["lost_updates"].is_number_integer()) << records[0];
  EXPECT_GE(records[0]["lost_updates"].get<int>(), 0) << records[0];
  EXPECT_LE(records[0]["lost_updates"].get<int>(), 90 - resumed) << records[0];
  // The restarted server got its shard and slots back at that step and made
  // exactly the updates after it.
  const auto server = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  EXPECT_EQ(server["global_step"], 90) << server;
  EXPECT_EQ(server["model_updates"].get<int>(), 90 - resumed) << server;

  auto uninterrupted = testing::runTandem("launch --ps 2 --workers 2 -- " + restartArgs(clean, extra));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  testing::expectSameParameters(run + "/checkpoint.ckpt", clean + "/checkpoint.ckpt");
}

TEST(LaunchRestart, AsyncJobCountsTheUpdatesARestartLost) {
  TempDir dir;
  const std::string run = dir.str("run");
  const std::string extra = "--max-steps 400 --checkpoint-every 50 --ps-mode async --lr 0.01 --debug-step-delay-ms 10";
  const int code =
      killServerAfterFirstCheckpoint(dir, run, "launch --ps 1 --workers 2 --max-restarts 1 -- " + restartArgs(run, extra));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  const auto records = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(records.size(), 1u) << log;
  const auto& r = records[0];
  const int resumed = r["resume_step"].get<int>();
  ASSERT_TRUE(r["last_reported_step"].is_number()) << r;
  EXPECT_GE(r["last_reported_step"].get<int>(), resumed) << r;
  EXPECT_EQ(r["lost_updates"].get<int>(), r["last_reported_step"].get<int>() - resumed) << r;
  EXPECT_NE(log.find(fmt::format("{} update(s) since it are lost", r["lost_updates"].get<int>())), std::string::npos)
      << log;
  // The updates add up: the checkpoint's, then the restarted server's.
  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  const auto server = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  EXPECT_EQ(chief["global_step"], 400) << chief;
  EXPECT_EQ(server["model_updates"].get<int>() + resumed, 400) << server;
}

// Async jobs are elastic: a killed worker is started again alone, joins the
// running job in its predecessor's place, and the steps add up.
TEST(LaunchRestart, AsyncJobTakesAReplacementWorkerAndTheStepsAddUp) {
  TempDir dir;
  const std::string run = dir.str("run");
  const int code = killWorkerTwoOnceItTrains(dir, run, "--max-steps 600 --ps-mode async --lr 0.01");
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("restart 1 of 1: worker 2"), std::string::npos) << log;
  EXPECT_NE(log.find("a new worker 2 joins it"), std::string::npos) << log;
  EXPECT_NE(log.find("joined a running job in place of a lost worker 2"), std::string::npos) << log;
  EXPECT_EQ(log.find("training went on without it"), std::string::npos) << log;
  const auto records = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(records.size(), 1u) << log;
  EXPECT_EQ(records[0]["replaced"], "worker 2");

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  const auto server = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  const auto replacement = nlohmann::json::parse(readFile(fs::path(run) / "workers" / "worker-2" / "summary.json"));
  EXPECT_EQ(chief["global_step"], 600) << chief;
  EXPECT_EQ(server["global_step"], 600) << server;
  EXPECT_EQ(server["rejoined_workers"], 1) << server;
  EXPECT_TRUE(server["lost_workers"].empty()) << server;
  const auto steps = server["steps_by_worker"].get<std::vector<int>>();
  ASSERT_EQ(steps.size(), 3u) << server;
  EXPECT_EQ(steps[0] + steps[1] + steps[2], 600) << server;
  EXPECT_EQ(steps[0], chief["worker_steps"].get<int>()) << chief;
  // Worker 2's steps are its predecessor's and then the replacement's own.
  EXPECT_GT(replacement["worker_steps"].get<int>(), 0) << replacement;
  EXPECT_LT(replacement["worker_steps"].get<int>(), steps[2]) << replacement << server;
  // A push the dead worker sent before it died may still have been applied.
  EXPECT_GE(server["model_updates"].get<int>(), 600) << server;
  EXPECT_LE(server["model_updates"].get<int>(), 601) << server;
}

// Bounded staleness too (--staleness without --ps-mode async, which once
// fell to a gang restart): the replacement continues its predecessor's
// clock, and every worker index makes all of its steps.
TEST(LaunchRestart, BoundedStalenessJobTakesAReplacementWorker) {
  TempDir dir;
  const std::string run = dir.str("run");
  const int code = killWorkerTwoOnceItTrains(dir, run, "--max-steps 300 --staleness 2 --lr 0.01");
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("a new worker 2 joins it"), std::string::npos) << log;
  EXPECT_EQ(log.find("every task continues from"), std::string::npos) << log;
  const auto server = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  EXPECT_EQ(server["steps_by_worker"], nlohmann::json({300, 300, 300})) << server;
  EXPECT_EQ(server["rejoined_workers"], 1) << server;
}

// Sync jobs too: a killed worker is started again alone, worker 0 included
// (launch serves the store). Nobody rolls back: the others complete the
// step it died in with the pushes that came, wait at the next step
// boundary for its replacement, and go on with it; every step is one
// update. The returned chief writes the job's records on.
TEST(LaunchRestart, SyncJobTakesReplacementWorkersAtAStepBoundaryWithoutRollingBack) {
  TempDir dir;
  const std::string run = dir.str("run");
  const pid_t pid = testing::spawnTandem(
      "launch --ps 2 --workers 3 --max-restarts 2 -- " +
          restartArgs(run, "--max-steps 400 --lr 0.01 --checkpoint-every 100 --debug-step-delay-ms 20 "
                           "--ps-chunk-mb 0.02"),
      dir.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, fs::path(run) / "workers" / "worker-2" / "metrics.jsonl",
                                     std::chrono::seconds(120)))
      << readFile(dir.path() / "log");
  testing::killTasks(run, "worker", "2");
  ASSERT_TRUE(testing::waitForOutput(pid, fs::path(run) / "checkpoints" / "step-200.ckpt", std::chrono::seconds(120)))
      << readFile(dir.path() / "log");
  testing::killTasks(run, "worker", "0");
  const int code = testing::waitForExit(pid, std::chrono::seconds(180));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("restart 1 of 2: worker 2"), std::string::npos) << log;
  EXPECT_NE(log.find("restart 2 of 2: worker 0"), std::string::npos) << log;
  EXPECT_NE(log.find("joined a running sync job in place of a lost worker 2"), std::string::npos) << log;
  EXPECT_NE(log.find("joined a running sync job in place of a lost worker 0"), std::string::npos) << log;
  EXPECT_EQ(log.find("every task continues from the checkpoint"), std::string::npos) << log;
  const auto records = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(records.size(), 2u) << log;
  for (const auto& r : records) {
    EXPECT_EQ(r["lost_updates"], 0) << r;
    EXPECT_EQ(r["rolled_back"], false) << r;
  }

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["global_step"], 400) << chief;
  EXPECT_EQ(chief["chief_returned"], true) << chief;
  EXPECT_GT(chief["worker_steps"].get<int>(), 0) << chief;
  EXPECT_LT(chief["worker_steps"].get<int>(), 200) << chief;
  EXPECT_TRUE(fs::exists(fs::path(run) / "checkpoints" / "step-300.ckpt")) << "the returned chief's checkpoint";
  const auto replacement = nlohmann::json::parse(readFile(fs::path(run) / "workers" / "worker-2" / "summary.json"));
  EXPECT_GT(replacement["worker_steps"].get<int>(), 0) << replacement;
  EXPECT_LT(replacement["worker_steps"].get<int>(), 400) << replacement;
  // Every chunk on both servers made exactly one update a step.
  for (int s = 0; s < 2; ++s) {
    const auto server = nlohmann::json::parse(readFile(fs::path(run) / "ps" / fmt::format("ps-{}", s) / "summary.json"));
    EXPECT_EQ(server["model_updates"], 400) << server;
    EXPECT_EQ(server["rejoined_workers"], 2) << server;
    EXPECT_TRUE(server["lost_workers"].empty()) << server;
  }
  const auto ps0 = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  EXPECT_EQ(ps0["global_step"], 400) << ps0;
}

// The chief too: the servers hold the job, so a killed worker 0 is started
// again, joins, and is the chief again: it checkpoints, evaluates and writes
// the summary of the whole job. Launch serves the store, so nothing waits
// for worker 0's process, and the job goes on taking deaths: a replicated
// server killed next is started again, and the returned chief sets it up.
TEST(LaunchRestart, AsyncJobTakesBackAKilledChiefThatWritesTheJobsRecordsOn) {
  TempDir dir;
  const std::string run = dir.str("run");
  const pid_t pid = testing::spawnTandem(
      "launch --ps 2 --workers 2 --max-restarts 2 -- " +
          restartArgs(run, "--max-steps 300 --checkpoint-every 40 --ps-mode async --ps-replicas 2 --lr 0.01 "
                           "--debug-step-delay-ms 20"),
      dir.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, fs::path(run) / "checkpoints" / "latest", std::chrono::seconds(120)))
      << readFile(dir.path() / "log");
  testing::killTasks(run, "worker", "0");
  ASSERT_TRUE(testing::waitForText(fs::path(run) / "metrics.jsonl", "chief_returned", std::chrono::seconds(60)))
      << readFile(dir.path() / "log");
  testing::killTasks(run, "ps", "1");
  const int code = testing::waitForExit(pid, std::chrono::seconds(180));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("restart 1 of 2: worker 0"), std::string::npos) << log;
  EXPECT_NE(log.find("joined a running job in place of a lost worker 0"), std::string::npos) << log;
  EXPECT_NE(log.find("restart 2 of 2: ps 1"), std::string::npos) << log;
  // The returned chief set up the server's replacement as the first would have.
  EXPECT_NE(log.find("worker 0: ps 1 is back: ps 0 copies it"), std::string::npos) << log;
  std::vector<std::string> replaced;
  for (const auto& r : testing::jsonLines(fs::path(run) / "restarts.jsonl")) {
    if (r.contains("replaced")) replaced.push_back(r["replaced"]);
  }
  EXPECT_EQ(replaced, (std::vector<std::string>{"worker 0", "ps 1"})) << log;

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  const auto server = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  EXPECT_TRUE(chief["chief_returned"].get<bool>()) << chief;
  EXPECT_EQ(chief["global_step"], 300) << chief;
  EXPECT_EQ(chief["trained_steps"], 300) << chief;
  const auto steps = server["steps_by_worker"].get<std::vector<int>>();
  ASSERT_EQ(steps.size(), 2u) << server;
  EXPECT_EQ(steps[0] + steps[1], 300) << server;
  EXPECT_LT(chief["worker_steps"].get<int>(), steps[0]) << chief << server;  // its predecessor's came first
  // Its records follow its predecessor's in the same file, to the job's end.
  const auto metrics = testing::jsonLines(fs::path(run) / "metrics.jsonl");
  int returned = 0, last_eval = -1;
  for (const auto& m : metrics) {
    if (m["type"] == "chief_returned") ++returned;
    if (m["type"] == "eval") last_eval = m["step"].get<int>();
  }
  EXPECT_EQ(returned, 1);
  EXPECT_EQ(last_eval, 300);
  // Its checkpoints hold the servers' state, and none is left half-written.
  EXPECT_TRUE(fs::exists(fs::path(run) / "checkpoint.ckpt"));
  for (const auto& e : fs::directory_iterator(fs::path(run) / "checkpoints")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  auto resumed = testing::runTandem("train " + testing::syntheticTrainArgs("mlp", 16, dir.str("check"),
                                                                           "--max-steps 301 --resume " + run +
                                                                               "/checkpoint.ckpt"));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
}

TEST(LaunchRestart, WithoutRestartsLeftTheJobFailsAndBadInputIsNeverRestarted) {
  TempDir dir;
  const std::string run = dir.str("run");
  const int code = killServerAfterFirstCheckpoint(
      dir, run, "launch --ps 1 --workers 1 -- " + restartArgs(run, "--max-steps 100000 --checkpoint-every 5"));
  const std::string log = readFile(dir.path() / "log");
  EXPECT_EQ(code, 1) << log;
  EXPECT_EQ(log.find("restart 1"), std::string::npos) << log;

  auto bad = testing::runTandem("launch --ps 1 --workers 1 --max-restarts 3 -- " +
                                restartArgs(dir.str("bad"), "--max-steps 10 --lr 0"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(bad.output.find("restart 1"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(fs::path(dir.str("bad")) / "restarts.jsonl"));
  // Nor is an elastic job's worker started again alone.
  auto bad_async = testing::runTandem("launch --ps 1 --workers 2 --max-restarts 3 -- " +
                                      restartArgs(dir.str("bad-async"), "--max-steps 10 --ps-mode async --lr 0"));
  EXPECT_EQ(bad_async.exit_code, 2) << bad_async.output;
  EXPECT_EQ(bad_async.output.find("restart 1"), std::string::npos) << bad_async.output;

  auto negative = testing::runTandem("launch --max-restarts -1 -- " + restartArgs(dir.str("neg"), "--max-steps 1"));
  EXPECT_EQ(negative.exit_code, 2) << negative.output;
  EXPECT_NE(negative.output.find("--max-restarts"), std::string::npos) << negative.output;

  // Tasks restarting themselves would fight launch's own restarts.
  auto in_place = testing::runTandem("launch --ps 1 -- " + restartArgs(dir.str("wait"), "--max-steps 1 --restart-wait 9"));
  EXPECT_EQ(in_place.exit_code, 2) << in_place.output;
  EXPECT_NE(in_place.output.find("--restart-wait: launch restarts the tasks itself"), std::string::npos)
      << in_place.output;
}

}  // namespace
}  // namespace tandem
