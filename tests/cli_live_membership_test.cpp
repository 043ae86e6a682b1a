// A synchronous all-reduce job with a live membership (--min-workers):
// a worker killed mid-run leaves the others training without a rollback,
// too many deaths stop the job naming the dead, a job grows when the
// discovery script finds room, and flags that cannot hold are refused
// before anything starts.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
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

// The job's train records in OUT/metrics.jsonl, whoever was rank 0 when
// each was written: every 10 steps up to `last`, none twice, none skipped.
void expectJobStepsLoggedOnce(const std::string& run, int64_t last) {
  int64_t logged = 0;
  for (const auto& r : testing::jsonLines(fs::path(run) / "metrics.jsonl")) {
    if (r["type"] != "train") continue;
    EXPECT_EQ(r["step"].get<int64_t>(), logged + 10) << r;
    logged = r["step"].get<int64_t>();
  }
  EXPECT_EQ(logged, last);
}

// Whether a membership change in restarts.jsonl lost `worker`, whether the
// others took it for dead first or its new process came back before.
bool departedIn(const std::vector<nlohmann::json>& records, int worker) {
  for (const auto& r : records) {
    for (const auto& d : r.value("departed", nlohmann::json::array())) {
      if (d["worker"] == worker) return true;
    }
  }
  return false;
}

// Launches 3 workers with `flags`, waits until worker 2 has logged, then
// kills the workers whose indices match `indices` ("2", "1|2"). Returns
// launch's exit code.
int killMidRun(const TempDir& dir, const std::string& run, const std::string& flags, const std::string& indices,
               const std::string& launch_flags = "") {
  const pid_t pid = testing::spawnTandem(
      "launch --workers 3 " + launch_flags + " -- " + testing::syntheticTrainArgs("mlp", 16, run, flags),
      dir.str("log"));
  if (!testing::waitForOutput(pid, fs::path(run) / "workers" / "worker-2" / "metrics.jsonl",
                              std::chrono::seconds(120))) {
    return -2;
  }
  testing::killTasks(run, "worker", "(" + indices + ")");
  return testing::waitForExit(pid, std::chrono::seconds(180));
}

// Three workers, one killed once it has logged: the two others agree on
// the new members, do the failed step again and train to the end, their
// replicas checked equal every 5 steps after the change as before it.
TEST(LiveMembership, AKilledWorkerLeavesTheOthersTrainingWithoutARollback) {
  TempDir dir;
  const std::string run = dir.str("run");
  const int code =
      killMidRun(dir, run, "--max-steps 160 --min-workers 2 --verify-replicas-every 5 --debug-step-delay-ms 15", "2");
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("worker 2 (pid"), std::string::npos) << log;
  EXPECT_NE(log.find("training went on without it"), std::string::npos) << log;
  EXPECT_NE(log.find("members: 3 -> 2 worker(s) at step"), std::string::npos) << log;

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["steps"], 160) << chief;
  EXPECT_EQ(chief["workers"], 2) << chief;
  EXPECT_EQ(chief["membership_changes"], 1) << chief;
  EXPECT_EQ(chief["strategy"]["membership"]["workers"], nlohmann::json({0, 1})) << chief;
  const auto other = nlohmann::json::parse(readFile(fs::path(run) / "workers" / "worker-1" / "summary.json"));
  EXPECT_EQ(other["steps"], 160) << other;
  EXPECT_EQ(other["rank"], 1) << other;

  const auto changes = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(changes.size(), 1u) << log;
  const nlohmann::json& change = changes[0];
  EXPECT_EQ(change["kind"], "membership") << change;
  EXPECT_EQ(change["workers_before"], 3) << change;
  EXPECT_EQ(change["workers_after"], 2) << change;
  EXPECT_EQ(change["lost_updates"], 0) << change;
  EXPECT_EQ(change["rolled_back"], false) << change;
  ASSERT_EQ(change["departed"].size(), 1u) << change;
  EXPECT_EQ(change["departed"][0]["worker"], 2) << change;
  EXPECT_GT(change["step"].get<int>(), 0) << change;
  EXPECT_LT(change["step"].get<int>(), 160) << change;
  expectJobStepsLoggedOnce(run, 160);
}

// Under launch --max-restarts, only the killed worker starts again: it
// joins the running job at a step boundary, copies the parameters,
// optimizer state, step and data position from worker 0, and trains to
// the end with the others, its replica checked equal to theirs.
TEST(LiveMembership, ARestartedWorkerJoinsTheRunningJobWithAPeersState) {
  TempDir dir;
  const std::string run = dir.str("run");
  // Checked every step: whichever step the joiner comes in at, the check
  // after it is one the joiner must not be waited for in.
  const int code = killMidRun(dir, run, "--max-steps 200 --min-workers 2 --verify-replicas-every 1 "
                                        "--optimizer adam --lr 0.001 --debug-step-delay-ms 15",
                              "2", "--max-restarts 1");
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("the job goes on and a new worker 2 joins it"), std::string::npos) << log;
  EXPECT_NE(log.find("joining the running job"), std::string::npos) << log;
  EXPECT_EQ(log.find("resumed from"), std::string::npos) << "nobody reads a checkpoint\n" << log;

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["steps"], 200) << chief;
  EXPECT_EQ(chief["workers"], 3) << chief;
  EXPECT_EQ(chief["strategy"]["membership"]["workers"], nlohmann::json({0, 1, 2})) << chief;
  const auto joiner = nlohmann::json::parse(readFile(fs::path(run) / "workers" / "worker-2" / "summary.json"));
  EXPECT_EQ(joiner["steps"], 200) << joiner;
  EXPECT_EQ(joiner["rank"], 2) << joiner;
  EXPECT_TRUE(joiner["resumed_from"].is_null()) << joiner;
  EXPECT_EQ(joiner["trained_steps"], joiner["worker_steps"]) << "it counts only the steps it trained" << joiner;
  EXPECT_LT(joiner["trained_steps"].get<int>(), 200) << joiner;

  // restarts.jsonl: the launcher's restart, then each change of members the
  // chief saw; the last takes worker 2 in, copying from worker 0.
  const auto records = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_GE(records.size(), 2u) << log;
  EXPECT_EQ(records[0]["replaced"], "worker 2") << records[0];
  const nlohmann::json& taken_in = records.back();
  EXPECT_EQ(taken_in["kind"], "membership") << taken_in;
  EXPECT_EQ(taken_in["workers_after"], 3) << taken_in;
  EXPECT_EQ(taken_in["lost_updates"], 0) << taken_in;
  EXPECT_EQ(taken_in["rolled_back"], false) << taken_in;
  EXPECT_EQ(taken_in["joined"], nlohmann::json({2})) << taken_in;
  EXPECT_NE(log.find("worker 2 copied step"), std::string::npos) << log;
  EXPECT_TRUE(departedIn(records, 2)) << log;
  expectJobStepsLoggedOnce(run, 200);
}

// Launch serves a live job's store, so worker 0 may die too. Without a
// restart, worker 1 becomes rank 0 and takes the run directory over: the
// job's metrics, restarts.jsonl, the final checkpoint and the summary.
TEST(LiveMembership, WorkerZeroKilledLeavesWorkerOneWritingTheRun) {
  TempDir dir;
  const std::string run = dir.str("run");
  const int code =
      killMidRun(dir, run, "--max-steps 160 --min-workers 2 --verify-replicas-every 5 --debug-step-delay-ms 15", "0");
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("worker 0 (pid"), std::string::npos) << log;
  EXPECT_NE(log.find("training went on without it"), std::string::npos) << log;
  EXPECT_NE(log.find("[worker 1] rank 0 now: this worker writes"), std::string::npos) << log;

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["steps"], 160) << chief;
  EXPECT_EQ(chief["rank"], 0) << chief;
  EXPECT_EQ(chief["workers"], 2) << chief;
  EXPECT_EQ(chief["strategy"]["membership"]["workers"], nlohmann::json({1, 2})) << chief;
  EXPECT_TRUE(fs::exists(fs::path(run) / "checkpoint.ckpt"));
  const auto changes = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(changes.size(), 1u) << log;
  EXPECT_EQ(changes[0]["departed"][0]["worker"], 0) << changes[0];
  EXPECT_EQ(changes[0]["lost_updates"], 0) << changes[0];
  EXPECT_EQ(changes[0]["rolled_back"], false) << changes[0];
  expectJobStepsLoggedOnce(run, 160);
}

// Under launch --max-restarts, worker 0's replacement joins the running
// job with a peer's state, as any other worker's does.
TEST(LiveMembership, WorkerZeroKilledIsReplacedWhileTheOthersTrainOn) {
  TempDir dir;
  const std::string run = dir.str("run");
  // Checkpoints in --out before the kill: the replacement must not load one.
  const int code = killMidRun(dir, run, "--max-steps 200 --min-workers 2 --verify-replicas-every 5 "
                                        "--optimizer adam --lr 0.001 --debug-step-delay-ms 15 --checkpoint-every 5",
                              "0", "--max-restarts 1");
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("worker 0: joining the running job"), std::string::npos) << log;
  EXPECT_EQ(log.find("resumed from"), std::string::npos) << "nobody reads a checkpoint\n" << log;

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["steps"], 200) << chief;
  EXPECT_EQ(chief["rank"], 0) << chief;
  EXPECT_EQ(chief["workers"], 3) << chief;
  EXPECT_EQ(chief["strategy"]["membership"]["workers"], nlohmann::json({0, 1, 2})) << chief;
  EXPECT_LT(chief["trained_steps"].get<int>(), 200) << "worker 0's replacement trained only since it joined" << chief;
  EXPECT_TRUE(fs::exists(fs::path(run) / "checkpoint.ckpt"));

  const auto records = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_GE(records.size(), 2u) << log;
  EXPECT_EQ(records[0]["replaced"], "worker 0") << records[0];
  EXPECT_TRUE(departedIn(records, 0)) << log;
  const nlohmann::json& taken_in = records.back();
  EXPECT_EQ(taken_in["kind"], "membership") << taken_in;
  EXPECT_EQ(taken_in["joined"], nlohmann::json({0})) << taken_in;
  EXPECT_EQ(taken_in["lost_updates"], 0) << taken_in;
  EXPECT_EQ(taken_in["rolled_back"], false) << taken_in;
  expectJobStepsLoggedOnce(run, 200);
}

// Two of three killed at once with --min-workers 2: the survivor stops with
// exit 1, naming both dead workers and the flag.
TEST(LiveMembership, FewerThanMinWorkersLeftStopsTheJobNamingTheDead) {
  TempDir dir;
  const std::string run = dir.str("run");
  const int code = killMidRun(dir, run, "--max-steps 2000 --min-workers 2 --debug-step-delay-ms 15", "1|2");
  const std::string log = readFile(dir.path() / "log");
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("the job stops: 1 worker left, fewer than --min-workers 2; lost: worker 1 (silent for "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("worker 2 (silent for "), std::string::npos) << log;
}

// A job started with 2 workers and --max-workers 3 grows when the
// discovery script lists a third slot: launch starts worker 2, beyond the
// listed workers, and it joins the running job at a step boundary with a
// peer's state, its replica checked equal to the others' after every step
// from then on. Once it has trained, the job is stopped, so that no timing decides
// whether it joined before the end.
// The discovery script lists a third slot: launch starts worker 2, which
// joins the running job. Then it lists two again: launch asks worker 2 to
// leave (SIGUSR2), and the others go on without it, no update lost.
TEST(LiveMembership, TheDiscoveryScriptGrowsTheJobAndShrinksItAgain) {
  TempDir dir;
  const std::string run = dir.str("run");
  const std::string slots = dir.str("slots");
  std::ofstream(slots) << "localhost:2\n";
  const std::string script = dir.str("discover.sh");
  std::ofstream(script) << "#!/bin/sh\ncat " << slots << "\n";
  fs::permissions(script, fs::perms::owner_all);
  const pid_t pid = testing::spawnTandem(
      "launch --workers 2 --host-discovery-script " + script + " -- " +
          testing::syntheticTrainArgs("mlp", 16, run,
                                      "--max-steps 100000 --max-workers 3 --verify-replicas-every 1 "
                                      "--optimizer adam --lr 0.001 --debug-step-delay-ms 15"),
      dir.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, fs::path(run) / "workers" / "worker-1" / "metrics.jsonl",
                                     std::chrono::seconds(120)))
      << readFile(dir.path() / "log");
  std::ofstream(slots) << "localhost:3\n";
  ASSERT_TRUE(testing::waitForOutput(pid, fs::path(run) / "workers" / "worker-2" / "metrics.jsonl",
                                     std::chrono::seconds(120)))
      << readFile(dir.path() / "log");
  std::ofstream(slots) << "localhost:2\n";
  auto logged = [&](const std::string& text) {
    return testing::waitForText(dir.path() / "log", text, std::chrono::seconds(60));
  };
  ASSERT_TRUE(logged("launch: worker 2 left the job; the others go on without it")) << readFile(dir.path() / "log");
  ASSERT_TRUE(logged("members: 3 -> 2 worker(s)")) << readFile(dir.path() / "log");
  ::kill(pid, SIGTERM);
  const int code = testing::waitForExit(pid, std::chrono::seconds(120));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 130) << log;
  EXPECT_NE(log.find("the discovery script lists 3 slot(s) here: worker 2 starts and joins the running job"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("joining the running job"), std::string::npos) << log;
  EXPECT_NE(log.find("the discovery script lists 2 slot(s) here: worker 2 leaves the job at its next step boundary"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("worker 2 left the job after step"), std::string::npos) << log;
  EXPECT_EQ(log.find("replicas diverged"), std::string::npos) << log;

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  const int steps = chief["steps"].get<int>();
  EXPECT_EQ(chief["workers"], 2) << chief;
  EXPECT_EQ(chief["strategy"]["membership"]["workers"], nlohmann::json({0, 1})) << chief;

  const auto records = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(records.size(), 2u) << log;
  EXPECT_EQ(records[0]["kind"], "membership") << records[0];
  EXPECT_EQ(records[0]["workers_before"], 2) << records[0];
  EXPECT_EQ(records[0]["workers_after"], 3) << records[0];
  EXPECT_EQ(records[0]["joined"], nlohmann::json({2})) << records[0];
  EXPECT_EQ(records[0]["departed"], nlohmann::json::array()) << records[0];
  EXPECT_EQ(records[0]["lost_updates"], 0) << records[0];
  EXPECT_EQ(records[1]["workers_before"], 3) << records[1];
  EXPECT_EQ(records[1]["workers_after"], 2) << records[1];
  ASSERT_EQ(records[1]["departed"].size(), 1u) << records[1];
  EXPECT_EQ(records[1]["departed"][0]["worker"], 2) << records[1];
  EXPECT_EQ(records[1]["departed"][0]["why"], "left") << records[1];
  EXPECT_EQ(records[1]["lost_updates"], 0) << records[1];
  EXPECT_GT(records[1]["step"].get<int>(), records[0]["step"].get<int>()) << records[1];
  EXPECT_GT(steps, records[1]["step"].get<int>()) << records[1];
}

TEST(LiveMembership, FlagsThatCannotHoldAreRefusedNamingTheValues) {
  TempDir dir;
  const std::string run = dir.str("run");
  auto refused = [](const std::string& args, const std::string& message) {
    const auto result = testing::runTandem(args);
    EXPECT_EQ(result.exit_code, 2) << args << "\n" << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << args << "\n" << result.output;
  };
  auto train = [&](const std::string& launch_flags, const std::string& flags) {
    return "launch " + launch_flags + " -- " + testing::syntheticTrainArgs("mlp", 16, run, flags);
  };
  refused(train("--workers 4", "--min-workers 5"), "--min-workers 5: the job has only 4 workers");
  refused(train("--workers 4", "--min-workers -1"), "--min-workers: must be >= 0, got -1");
  refused(train("--workers 4", "--max-workers 3"), "--max-workers 3 is below the job's 4 workers");
  refused(train("--workers 4", "--max-workers 3 --min-workers 2"), "--max-workers 3 is below the job's 4 workers");
  refused(train("--workers 4 --host-discovery-script /bin/true", ""),
          "--host-discovery-script: only a live all-reduce job grows or shrinks; pass --max-workers above or "
          "--min-workers below --workers 4 after --");
  refused(train("--workers 2 --max-workers 3", "--min-workers 2"),
          "--max-workers: launch takes it for a program (hvd.elastic); for tandem train pass it after --");
  refused("train " + testing::syntheticTrainArgs("mlp", 16, run, "--min-workers 2"), "--min-workers");
  // A program grows by launch's own --max-workers, with --min-workers.
  refused("launch --workers 2 --max-workers 3 -- /bin/true",
          "--max-workers 3: only an elastic program grows; pass --min-workers");
  refused("launch --workers 3 --min-workers 2 --max-workers 2 -- /bin/true",
          "--max-workers 2: expected the job's 3 workers to");
  refused("launch --workers 2 --min-workers 2 --host-discovery-script /bin/true -- /bin/true",
          "--host-discovery-script: only a live all-reduce job grows or shrinks; pass --max-workers above or "
          "--min-workers below --workers 2 and --min-workers to launch");
}

}  // namespace
}  // namespace tandem
