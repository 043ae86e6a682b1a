// --ps-replicas 2: every chunk lives on two servers and every push reaches
// both, so a sync job goes on through a server's kill -9 with no update
// lost, ending bit-identical to an uninterrupted run without replicas.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <thread>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using testing::readFile;
using testing::TempDir;

// Async at sync's rate and momentum: on this tiny MLP the loss collapses
// within 50 steps (issue 52), which would stop the run. These tests count
// updates and compare bits, so they let it run on.
const char* const kAsync = "--ps-mode async --stop-on-collapse off";

// The run's flags but its length; the uninterrupted run has no replicas.
std::string flagsFor(int steps) {
  return "--max-steps " + std::to_string(steps) + " --seed 3 --debug-step-delay-ms 25 --ps-chunk-mb 0.02 "
         "--checkpoint-every 0";
}

// 2 PS + 2 workers with --ps-replicas 2 under `launch launch_flags`,
// started in the background once worker 0 has logged (nullopt: it never
// did; the log says why).
std::optional<pid_t> startReplicated(const TempDir& dir, const std::string& run, int steps,
                                     const std::string& launch_flags = "", const std::string& train_flags = "") {
  const std::string args =
      testing::syntheticTrainArgs("mlp", 16, run, flagsFor(steps) + " --ps-replicas 2 " + train_flags);
  const pid_t pid = testing::spawnTandem("launch --ps 2 --workers 2 " + launch_flags + " -- " + args, dir.str("log"));
  if (!testing::waitForOutput(pid, fs::path(run) / "metrics.jsonl", std::chrono::seconds(120))) return std::nullopt;
  return pid;
}

void killServer(const std::string& run, int index) {
  testing::killTasks(run, "ps", std::to_string(index));
}

// The servers' deaths launch recorded in the run's restarts.jsonl.
int serverLosses(const std::string& run) {
  int losses = 0;
  for (const auto& r : testing::jsonLines(fs::path(run) / "restarts.jsonl")) {
    losses += r.value("kind", "") == "server_replica" ? 1 : 0;
  }
  return losses;
}

// The run ends with the parameters of the same run uninterrupted, without replicas.
void expectUninterruptedParameters(const TempDir& dir, const std::string& run, int steps) {
  const std::string clean = dir.str("clean");
  auto uninterrupted = testing::runTandem("launch --ps 2 --workers 2 -- " +
                                          testing::syntheticTrainArgs("mlp", 16, clean, flagsFor(steps)));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  testing::expectSameParameters(run + "/checkpoint.ckpt", clean + "/checkpoint.ckpt");
}

// Kills ps 0, which holds the step clocks besides its chunks, once worker
// 0 has logged: the workers' pulls, pushes and step reports go on at ps 1.
TEST(PsReplicas, AKilledServerLosesNoUpdateAndTheRunEndsBitIdentical) {
  TempDir dir;
  const std::string run = dir.str("run");
  const std::optional<pid_t> pid = startReplicated(dir, run, 120);
  ASSERT_TRUE(pid) << readFile(dir.path() / "log");
  killServer(run, 0);
  const int code = testing::waitForExit(*pid, std::chrono::seconds(180));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("ps 0 (pid"), std::string::npos) << log;
  EXPECT_NE(log.find("its chunks go on at their other replica (--ps-replicas 2)"), std::string::npos) << log;
  EXPECT_NE(log.find("ps 0 is lost; its chunks go on at their other replica, and no update is lost"),
            std::string::npos)
      << log;

  const auto records = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(records.size(), 1u) << log;
  EXPECT_EQ(records[0]["kind"], "server_replica") << records[0];
  EXPECT_EQ(records[0]["lost_updates"], 0) << records[0];
  EXPECT_EQ(records[0]["rolled_back"], false) << records[0];
  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["steps"], 120) << chief;
  EXPECT_EQ(chief["strategy"]["replicas"], 2) << chief;
  EXPECT_EQ(chief["strategy"]["lost_servers"], nlohmann::json({0})) << chief;
  // The survivor made every update of the run, as its own and as ps 0's backup.
  const auto survivor = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-1" / "summary.json"));
  EXPECT_EQ(survivor["global_step"], 120) << survivor;
  expectUninterruptedParameters(dir, run, 120);
}

// Under launch --max-restarts, a killed server is started again and the
// chief takes it back at a step boundary, its chunks copied from the other
// replica: so the other server's death later loses nothing either, and the
// run still ends bit-identical to an uninterrupted one.
TEST(PsReplicas, AKilledServersReplacementIsTakenBackSoTheNextDeathLosesNothingEither) {
  TempDir dir;
  const std::string run = dir.str("run");
  const std::optional<pid_t> pid = startReplicated(dir, run, 400, "--max-restarts 2");
  ASSERT_TRUE(pid) << readFile(dir.path() / "log");
  killServer(run, 0);
  auto logged = [&](const std::string& text) {
    return testing::waitForText(dir.path() / "log", text, std::chrono::seconds(60));
  };
  ASSERT_TRUE(logged("worker 1: ps 0 is back after step")) << readFile(dir.path() / "log");
  killServer(run, 1);
  const int code = testing::waitForExit(*pid, std::chrono::seconds(180));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("worker 0: ps 0 is back after step"), std::string::npos) << log;
  EXPECT_NE(log.find("the job goes on and a new ps 0 joins it"), std::string::npos) << log;
  EXPECT_NE(log.find("ps 1 is lost; its chunks go on at their other replica"), std::string::npos) << log;

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["steps"], 400) << chief;
  EXPECT_EQ(chief["strategy"]["lost_servers"], nlohmann::json({0, 1})) << chief;
  ASSERT_FALSE(chief["strategy"]["rejoined_servers"].empty()) << chief;
  EXPECT_EQ(chief["strategy"]["rejoined_servers"][0], 0) << chief;
  EXPECT_EQ(serverLosses(run), 2) << log;
  expectUninterruptedParameters(dir, run, 400);
}

// Every update of each chunk, by what the servers' summaries say: `server`
// made `updates` of each of the chunks it holds.
void expectEveryChunkUpdated(const nlohmann::json& server, uint64_t updates) {
  ASSERT_TRUE(server.contains("chunk_digests")) << server;
  for (const auto& [key, chunk] : server["chunk_digests"].items()) {
    EXPECT_EQ(chunk["updates"], updates) << "chunk " << key << " of " << server;
  }
}

// Async: each server forwards every push it applies to the backup of its
// chunks and acknowledges it once applied there. Uninterrupted, both
// holders of each chunk end with the same bits after the same updates.
TEST(PsReplicas, AsyncReplicasHoldTheSameBitsOnBothServers) {
  TempDir dir;
  const std::string run = dir.str("run");
  auto result = testing::runTandem("launch --ps 2 --workers 2 -- " +
                                   testing::syntheticTrainArgs("mlp", 16, run, flagsFor(60) +
                                                               " --ps-replicas 2 " + kAsync));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto ps0 = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  const auto ps1 = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-1" / "summary.json"));
  const uint64_t steps = ps0["global_step"];
  EXPECT_GE(steps, 60u) << ps0;
  expectEveryChunkUpdated(ps0, steps);
  expectEveryChunkUpdated(ps1, steps);
  int shared = 0;
  for (const auto& [key, chunk] : ps0["chunk_digests"].items()) {
    if (!ps1["chunk_digests"].contains(key)) continue;
    ++shared;
    EXPECT_EQ(chunk["digest"], ps1["chunk_digests"][key]["digest"]) << "chunk " << key;
  }
  EXPECT_EQ(shared, ps0["chunks"].get<int>()) << "every chunk is on both of 2 servers";
  EXPECT_GT(ps0["forwards_out"].get<int>(), 0) << ps0;
  // The momentum correction is on by default here too: each primary sent
  // the staleness it corrected for with the push, so the digests above
  // hold with a momentum that changed push by push. Each server counts the
  // pushes it ordered and those forwarded to it.
  for (const auto* ps : {&ps0, &ps1}) {
    ASSERT_TRUE(ps->contains("momentum_correction")) << *ps;
    EXPECT_GT((*ps)["push_staleness"]["mean"].get<double>(), 0) << *ps;
    EXPECT_LT((*ps)["momentum_correction"]["applied"].get<double>(), 0.9) << *ps;
    EXPECT_EQ((*ps)["push_staleness"]["pushes"].get<uint64_t>(),
              (*ps)["pushes"].get<uint64_t>() + (*ps)["forwards_in"].get<uint64_t>())
        << *ps;
  }
}

// Async: with ps 0 killed mid-run, ps 1 takes the workers' pushes of ps 0's
// chunks (those it was forwarded already once only) and makes every update
// of the run: no push is lost and none applied twice.
TEST(PsReplicas, AsyncAKilledServerLosesNoUpdate) {
  TempDir dir;
  const std::string run = dir.str("run");
  const std::optional<pid_t> pid = startReplicated(dir, run, 300, "", kAsync);
  ASSERT_TRUE(pid) << readFile(dir.path() / "log");
  // Mid-run: the job takes 4 s or more after its first metrics.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  killServer(run, 0);
  const int code = testing::waitForExit(*pid, std::chrono::seconds(180));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("ps 0 is lost; its chunks go on at their other replica, and no update is lost"),
            std::string::npos)
      << log;
  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["strategy"]["lost_servers"], nlohmann::json({0})) << chief;
  const auto survivor = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-1" / "summary.json"));
  const uint64_t steps = survivor["global_step"];
  EXPECT_GE(steps, 300u) << survivor;
  expectEveryChunkUpdated(survivor, steps);
  EXPECT_GT(survivor["forwards_in"].get<int>(), 0) << survivor;
}

// Async under launch --max-restarts: a killed server is started again and
// brought up by the live holder of its chunks, which copies it each chunk
// between two applies and forwards it every push after; so the other
// server's death later loses nothing either: the workers turn to the
// replacement, and it ends with every chunk updated once per step of the job.
TEST(PsReplicas, AsyncReplacementIsBroughtUpSoTheNextDeathLosesNothingEither) {
  TempDir dir;
  const std::string run = dir.str("run");
  const std::optional<pid_t> pid = startReplicated(dir, run, 600, "--max-restarts 2", kAsync);
  ASSERT_TRUE(pid) << readFile(dir.path() / "log");
  killServer(run, 0);
  ASSERT_TRUE(testing::waitForText(dir.path() / "log", "ps 0: every chunk is copied from its other holder",
                                   std::chrono::seconds(60)))
      << readFile(dir.path() / "log");
  killServer(run, 1);
  const int code = testing::waitForExit(*pid, std::chrono::seconds(180));
  const std::string log = readFile(dir.path() / "log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("worker 0: ps 0 is back: ps 1 copies it"), std::string::npos) << log;
  EXPECT_NE(log.find("worker 1: ps 0's replacement, copied from the other holders, takes this worker's requests"),
            std::string::npos)
      << log;
  const auto replacement = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  const uint64_t steps = replacement["global_step"];
  EXPECT_GE(steps, 600u) << replacement;
  expectEveryChunkUpdated(replacement, steps);
  EXPECT_EQ(serverLosses(run), 2) << log;
}

TEST(PsReplicas, ReplicasThatCannotHoldAreRefusedNamingTheValues) {
  TempDir dir;
  const std::string run = dir.str("run");
  auto refused = [&](const std::string& launch, const std::string& flags, const std::string& message) {
    const auto result =
        testing::runTandem("launch " + launch + " -- " + testing::syntheticTrainArgs("mlp", 16, run, flags));
    EXPECT_EQ(result.exit_code, 2) << flags << "\n" << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << flags << "\n" << result.output;
  };
  refused("--ps 2 --workers 2", "--ps-replicas 3",
          "--ps-replicas 3 with 2 server(s): each chunk needs that many different servers");
  refused("--ps 3 --workers 2", "--ps-replicas 3", "--ps-replicas 3: at most 2 (each chunk's own server and the next)");
  refused("--ps 2 --workers 2", "--ps-replicas 0", "--ps-replicas: must be >= 1, got 0");
  refused("--ps 1 --workers 2", "--ps-replicas 2",
          "--ps-replicas 2 with 1 server(s): each chunk needs that many different servers");
  refused("--ps 2 --workers 2", "--ps-replicas 2 --ps-mode async --delay-compensation 0.04",
          "--ps-replicas 2 with --delay-compensation 0.04: not built yet");
  refused("--workers 2", "--ps-replicas 2", "--ps-replicas");
}

}  // namespace
}  // namespace tandem
