// End-to-end tests of DiLoCo (--local-steps) on real `tandem launch`
// processes: the outer update is what its formula says in the cases where
// it reduces to a known run, a resume is exact, and bad input names its flag.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::checkpointParameters;
using testing::expectSameParameters;
using testing::maxAbsoluteDifference;
using testing::maxRelativeDifference;
using testing::runTandem;
using testing::summaryOf;
using testing::syntheticTrainArgs;
using testing::TempDir;


class Diloco : public ::testing::Test {
 protected:
  TempDir dir_;

  testing::ProcessResult launch(int workers, const std::string& out, const std::string& args) {
    return runTandem(fmt::format("launch --ps 1 --workers {} -- ", workers) +
                     syntheticTrainArgs("mlp", 16, dir_.str(out), args));
  }

  // Outer SGD at rate 1 without momentum makes each round's global model
  // the worker's local one: 1 PS + 1 worker (`mode`: its --ps-mode flags)
  // then trains as standalone does, with Adam's state carried across rounds.
  void expectUnitOuterSgdTrainsAsStandalone(const std::string& out, const std::string& mode) {
    const std::string inner = "--max-steps 30 --seed 4 --optimizer adam --lr 0.002";
    auto run = launch(1, out, inner + mode + " --local-steps 4 --outer-optimizer sgd --outer-lr 1 --outer-momentum 0");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    auto alone = runTandem("train " + syntheticTrainArgs("mlp", 16, dir_.str("alone"), inner + " --overwrite"));
    ASSERT_EQ(alone.exit_code, 0) << alone.output;
    // global - (global - local) rounds a little.
    EXPECT_LT(maxAbsoluteDifference(checkpointParameters(dir_.str(out + "/checkpoint.ckpt")),
                                    checkpointParameters(dir_.str("alone/checkpoint.ckpt"))),
              1e-5);
  }
};

TEST_F(Diloco, OneWorkerWithUnitOuterSgdTrainsAsStandalone) {
  expectUnitOuterSgdTrainsAsStandalone("diloco", "");
  const auto b = checkpointParameters(dir_.str("alone/checkpoint.ckpt"));
  auto start = runTandem("train " + syntheticTrainArgs("mlp", 16, dir_.str("start"), "--max-steps 1 --seed 4"));
  ASSERT_EQ(start.exit_code, 0) << start.output;
  EXPECT_GT(maxAbsoluteDifference(b, checkpointParameters(dir_.str("start/checkpoint.ckpt"))), 1e-2);

  const auto summary = summaryOf(dir_.path() / "diloco");
  const auto& d = summary["strategy"]["diloco"];
  EXPECT_EQ(d["local_steps"], 4);
  EXPECT_EQ(d["rounds"], 8) << "30 steps of 4: 7 rounds and a last, partial one";
  const auto server = summaryOf(dir_.path() / "diloco" / "ps" / "ps-0");
  EXPECT_EQ(server["model_updates"], 8);
  EXPECT_EQ(d["pushed_bytes"].get<int64_t>(), 8 * 4 * server["floats"].get<int64_t>());
}

// One local step of plain SGD per round, averaged and applied at outer rate
// 1: the global model moves by the mean of the workers' gradients, which is
// sync training on the combined batch.
TEST_F(Diloco, OneLocalStepAveragedIsSyncTraining) {
  const std::string inner = "--max-steps 20 --seed 6 --optimizer sgd --momentum 0 --lr 0.05";
  auto diloco = launch(2, "diloco", inner + " --local-steps 1 --outer-optimizer sgd --outer-lr 1 --outer-momentum 0");
  ASSERT_EQ(diloco.exit_code, 0) << diloco.output;
  auto sync = launch(2, "sync", inner);
  ASSERT_EQ(sync.exit_code, 0) << sync.output;
  const auto a = checkpointParameters(dir_.str("diloco/checkpoint.ckpt"));
  const auto b = checkpointParameters(dir_.str("sync/checkpoint.ckpt"));
  EXPECT_LT(maxRelativeDifference(a, b), 1e-5);
  EXPECT_EQ(summaryOf(dir_.path() / "diloco")["strategy"]["diloco"]["rounds"], 20);
}

// Checkpoints are taken at a round's end and hold the outer momentum and
// the chief's inner state; worker 1 keeps its own inner state beside them.
// Stopping there and resuming gives the uninterrupted run's bits. A resume
// with other DiLoCo settings is refused, naming the field.
TEST_F(Diloco, ResumeFromARoundsEndIsExact) {
  const std::string args = "--seed 8 --optimizer sgd --lr 0.05 --local-steps 3";
  auto straight = launch(2, "straight", args + " --max-steps 12");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto first = launch(2, "resumed", args + " --max-steps 6");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "resumed" / "workers" / "worker-1" / "inner-state" / "step-6.pt"));
  auto second = launch(2, "resumed", args + " --max-steps 12");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  expectSameParameters(dir_.str("straight/checkpoint.ckpt"), dir_.str("resumed/checkpoint.ckpt"));

  auto other = launch(2, "resumed", "--seed 8 --optimizer sgd --lr 0.05 --local-steps 4 --max-steps 16");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("distributed/local_steps differs"), std::string::npos) << other.output;

  // Without worker 1's own state the resume cannot be exact: named, not guessed.
  std::filesystem::remove(dir_.path() / "resumed" / "workers" / "worker-1" / "inner-state" / "step-12.pt");
  auto missing = launch(2, "resumed", args + " --max-steps 15");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("inner-state/step-12.pt: missing"), std::string::npos) << missing.output;
}

// Checkpoints asked for mid-round are taken at the round's end, by every worker.
TEST_F(Diloco, APeriodicCheckpointWaitsForTheRoundsEnd) {
  auto run = launch(2, "run", "--seed 2 --local-steps 4 --max-steps 18 --checkpoint-every 6");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (int step : {8, 12}) {
    EXPECT_TRUE(std::filesystem::exists(dir_.path() / "run" / "checkpoints" / fmt::format("step-{}.ckpt", step)))
        << step;
    EXPECT_TRUE(std::filesystem::exists(dir_.path() / "run" / "workers" / "worker-1" / "inner-state" /
                                        fmt::format("step-{}.pt", step)))
        << step;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "run" / "checkpoints" / "step-6.ckpt"));
}

// Async: each worker's outer gradient is applied as it arrives, scaled by
// its share. One worker's share is all of it.
TEST_F(Diloco, AsyncOneWorkerWithUnitOuterSgdTrainsAsStandalone) {
  expectUnitOuterSgdTrainsAsStandalone("async", " --ps-mode async");
  EXPECT_EQ(summaryOf(dir_.path() / "async")["mode"], "ps-async");
}

// Two async workers: every worker makes all its own steps and rounds (no
// shared steps), the servers apply every round of both, and the job
// resumes from its checkpoint with the chief's inner state for everyone.
TEST_F(Diloco, AsyncWorkersEachTrainTheirOwnStepsAndResume) {
  const std::string args = "--seed 3 --optimizer sgd --lr 0.02 --ps-mode async --local-steps 5";
  auto run = launch(2, "async", args + " --max-steps 20");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const auto& dir : {dir_.path() / "async", dir_.path() / "async" / "workers" / "worker-1"}) {
    const auto s = summaryOf(dir);
    EXPECT_EQ(s["worker_steps"], 20) << dir;
    EXPECT_EQ(s["strategy"]["diloco"]["rounds"], 4) << dir;
  }
  EXPECT_EQ(summaryOf(dir_.path() / "async" / "ps" / "ps-0")["model_updates"], 8);
  EXPECT_EQ(testing::checkpointGlobalStep(dir_.str("async/checkpoint.ckpt")), 20);
  auto resumed = launch(2, "async", args + " --max-steps 30");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("inner optimizer from the chief's"), std::string::npos) << resumed.output;
  EXPECT_EQ(summaryOf(dir_.path() / "async")["strategy"]["diloco"]["rounds"], 2);
}

// A round of local steps may outlast --peer-timeout, the silence after
// which a server gives up on a worker: the workers say they are alive.
TEST_F(Diloco, ARoundLongerThanThePeerTimeoutIsNotTakenForDeath) {
  auto run = launch(2, "slow", "--seed 2 --local-steps 12 --max-steps 24 --debug-step-delay-ms 150 --peer-timeout 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("giving up on it"), std::string::npos) << run.output;
  EXPECT_EQ(summaryOf(dir_.path() / "slow")["strategy"]["diloco"]["rounds"], 2);
}

TEST_F(Diloco, SixteenBitWireHalvesTheBytes) {
  auto run = launch(2, "bf16", "--seed 2 --local-steps 5 --max-steps 10 --wire-dtype bf16");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto d = summaryOf(dir_.path() / "bf16")["strategy"]["diloco"];
  const auto server = summaryOf(dir_.path() / "bf16" / "ps" / "ps-0");
  EXPECT_EQ(d["pushed_bytes"].get<int64_t>(), 2 * 2 * server["floats"].get<int64_t>());
}

// 8-bit pushes: a byte a value and a float32 scale per 128 (one chunk
// here); pulls stay float32, and error feedback keeps the run near
// float32's. The server receives exactly what the workers say they pushed.
TEST_F(Diloco, EightBitPushesCarryAQuarterOfTheBytes) {
  const std::string args = "--seed 2 --local-steps 5 --max-steps 20 --ps-chunk-mb 64";
  auto fp32 = launch(2, "fp32", args);
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  auto int8 = launch(2, "int8", args + " --push-bits 8");
  ASSERT_EQ(int8.exit_code, 0) << int8.output;
  const auto server = summaryOf(dir_.path() / "int8" / "ps" / "ps-0");
  ASSERT_EQ(server["chunks"], 1);
  const int64_t floats = server["floats"];
  int64_t pushed = 0;
  for (const auto& dir : {dir_.path() / "int8", dir_.path() / "int8" / "workers" / "worker-1"}) {
    const auto d = summaryOf(dir)["strategy"]["diloco"];
    EXPECT_EQ(d["push_format"], "int8");
    EXPECT_EQ(d["pushed_bytes"].get<int64_t>(), 4 * (floats + 4 * ((floats + 127) / 128))) << "4 rounds, " << dir;
    EXPECT_EQ(d["pulled_bytes"].get<int64_t>(), 4 * 4 * floats) << dir;
    pushed += d["pushed_bytes"].get<int64_t>();
  }
  EXPECT_EQ(pushed, server["bytes_in"].get<int64_t>());
  const double apart = maxRelativeDifference(checkpointParameters(dir_.str("int8/checkpoint.ckpt")),
                                             checkpointParameters(dir_.str("fp32/checkpoint.ckpt")));
  std::cout << "8-bit pushes end " << apart << " (largest relative difference) from float32's\n";
  EXPECT_GT(apart, 0.0);
  EXPECT_LT(apart, 1e-2);
}

TEST_F(Diloco, BadInputNamesTheFlag) {
  struct Case {
    std::string args;
    std::string says;
    bool servers = true;
  };
  const Case cases[] = {
      {"--local-steps 5", "--local-steps: only applies with parameter servers", false},
      {"--local-steps 0", "--local-steps: must be >= 1"},
      {"--local-steps 5 --outer-optimizer adam", "--outer-optimizer: expected"},
      {"--outer-lr 0.5", "--outer-lr: only applies with --local-steps"},
      {"--local-steps 5 --outer-momentum 1", "--outer-momentum: must be in [0, 1)"},
      {"--local-steps 5 --staleness 2", "--local-steps: DiLoCo runs with --ps-mode sync or async, not with --staleness"},
      {"--local-steps 5 --ps-mode async --staleness-lr on", "--local-steps: not with --staleness-lr on"},
      {"--local-steps 5 --push-bits 3", "--push-bits 3: expected 8 or 4"},
      {"--push-bits 8", "--push-bits: only applies with parameter servers", false},
  };
  for (const Case& c : cases) {
    const std::string args = "--max-steps 4 " + c.args;
    auto run = c.servers ? launch(1, "bad", args) : runTandem("train " + syntheticTrainArgs("mlp", 16, dir_.str("bad"), args));
    EXPECT_EQ(run.exit_code, 2) << c.args << "\n" << run.output;
    EXPECT_NE(run.output.find(c.says), std::string::npos) << c.args << "\n" << run.output;
  }
}

}  // namespace
}  // namespace tandem
