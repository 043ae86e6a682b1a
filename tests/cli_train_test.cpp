// End-to-end tests of `tandem train`, `eval` and `models` as real processes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "models/registry.hpp"
#include "support/process.hpp"
#include "support/run_artifacts.hpp"
#include "train/blas_check.hpp"
#include "train/runtime_info.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"

namespace tandem {
namespace {
using testing::readFile;
using testing::runTandem;
using testing::TempDir;
using testing::checkpointParameters;
using testing::trainLosses;

// Small Fashion-MNIST run: 2 threads so that results do not depend on the machine.
std::string quickArgs(const std::string& out, const std::string& extra = "") {
  return "train --model cnn --dataset fashion-mnist --batch-size 32 --threads 2 --log-every 5 --progress plain "
         "--out " + out + " " + extra;
}

class CliTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::fashionMnistInstalled()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  TempDir dir_;
};

TEST_F(CliTrain, WritesMetricsSummaryAndCheckpointAndLearns) {
  auto run = runTandem(quickArgs(dir_.str("run"), "--max-steps 60 --eval-every 30 --lr 0.05"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto summary = nlohmann::json::parse(readFile(dir_.path() / "run" / "summary.json"));
  for (const char* key : {"model", "dataset", "mode", "workers", "servers", "steps", "samples_per_sec", "final_loss",
                          "test_accuracy", "wall_seconds", "step_breakdown"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  EXPECT_EQ(summary["mode"], "standalone");
  EXPECT_EQ(summary["steps"], 60);
  EXPECT_GT(summary["samples_per_sec"].get<double>(), 0);
  for (const char* phase : {"input_wait", "forward_backward", "exposed_comm", "wait_workers", "update"}) {
    EXPECT_TRUE(summary["step_breakdown"].contains(phase)) << phase;
  }
  // Chance is 0.10; 60 steps of a working trainer reach well above it.
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.55) << summary.dump();
  auto losses = trainLosses(dir_.str("run"));
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "run" / "checkpoint.ckpt"));
  // Plain (non-terminal) progress: whole lines, no carriage returns.
  EXPECT_EQ(run.output.find('\r'), std::string::npos);
  EXPECT_NE(run.output.find("eval at step 30"), std::string::npos) << run.output;

  // `tandem eval` on the checkpoint reproduces the final evaluation.
  auto eval = runTandem("eval --threads 2 --checkpoint " + dir_.str("run/checkpoint.ckpt"));
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  auto report = nlohmann::json::parse(eval.output.substr(eval.output.find('{')));
  EXPECT_EQ(report["global_step"], 60);
  EXPECT_NEAR(report["test_accuracy"].get<double>(), summary["test_accuracy"].get<double>(), 1e-9);
}

TEST_F(CliTrain, SameSeedSameTrajectoryDifferentSeedDifferent) {
  const std::string extra = "--max-steps 20 --eval-every 1000 --prefetch-threads 2";
  ASSERT_EQ(runTandem(quickArgs(dir_.str("a"), extra + " --seed 7")).exit_code, 0);
  ASSERT_EQ(runTandem(quickArgs(dir_.str("b"), extra + " --seed 7")).exit_code, 0);
  ASSERT_EQ(runTandem(quickArgs(dir_.str("c"), extra + " --seed 8")).exit_code, 0);
  auto a = trainLosses(dir_.str("a"));
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, trainLosses(dir_.str("b")));
  EXPECT_NE(a, trainLosses(dir_.str("c")));
}

TEST_F(CliTrain, ResumeContinuesTheExactTrajectory) {
  // Nesterov momentum, weight decay, warmup + cosine and augmentation: every
  // piece of state the checkpoint must carry.
  const std::string extra =
      "--max-steps 20 --eval-every 1000 --nesterov --weight-decay 1e-4 --lr-schedule cosine --warmup-steps 4 "
      "--augment --prefetch-threads 2";
  auto full = runTandem(quickArgs(dir_.str("full"), extra + " --checkpoint-every 10"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto resumed = runTandem(quickArgs(dir_.str("resumed"), extra + " --resume " + dir_.str("full/checkpoints/step-10.ckpt")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto a = checkpointParameters(dir_.str("full/checkpoint.ckpt"));
  auto b = checkpointParameters(dir_.str("resumed/checkpoint.ckpt"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "parameter " << i << " differs";
  auto la = trainLosses(dir_.str("full"));
  auto lb = trainLosses(dir_.str("resumed"));
  ASSERT_EQ(lb.size(), 2u);
  EXPECT_EQ(la[2], lb[0]);
  EXPECT_EQ(la[3], lb[1]);
}

TEST_F(CliTrain, ResumeRefusesADifferentModel) {
  ASSERT_EQ(runTandem(quickArgs(dir_.str("a"), "--max-steps 2 --eval-every 1000")).exit_code, 0);
  auto run = runTandem("train --model resnet20 --max-steps 4 --threads 2 --out " + dir_.str("b") + " --resume " +
                       dir_.str("a/checkpoint.ckpt"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("model differs"), std::string::npos) << run.output;
}

TEST_F(CliTrain, SigtermEndsTheRunWithACheckpointThatResumes) {
  pid_t pid = testing::spawnTandem(quickArgs(dir_.str("run"), "--max-steps 100000"), dir_.str("log"));
  // Wait for training to be under way (first metrics line), bounded, and
  // stop waiting if the process died.
  ASSERT_TRUE(testing::waitForOutput(pid, dir_.path() / "run" / "metrics.jsonl", std::chrono::seconds(30)))
      << readFile(dir_.path() / "log");
  ::kill(pid, SIGTERM);
  int code = testing::waitForExit(pid, std::chrono::seconds(60));
  EXPECT_EQ(code, 130) << readFile(dir_.path() / "log");
  auto summary = nlohmann::json::parse(readFile(dir_.path() / "run" / "summary.json"));
  EXPECT_TRUE(summary["interrupted"].get<bool>());
  int64_t stopped_at = summary["steps"].get<int64_t>();
  EXPECT_GT(stopped_at, 0);
  EXPECT_LT(stopped_at, 100000);
  EXPECT_EQ(testing::checkpointGlobalStep(dir_.str("run/checkpoint.ckpt")), stopped_at);
  auto resumed = runTandem(quickArgs(dir_.str("resumed"), "--max-steps " + std::to_string(stopped_at + 2) +
                                                               " --eval-every 1000 --resume " +
                                                               dir_.str("run/checkpoint.ckpt")));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
}

TEST(CliErrors, BadInputsExitWithTwoAndNameTheCulprit) {
  TempDir dir;
  struct Case {
    std::string args;
    std::string expect;
  };
  std::ofstream(dir.path() / "garbage.ckpt") << "not a checkpoint";
  std::vector<Case> cases = {
      {"train --model nosuchnet --max-steps 1 --out " + dir.str("o"), "nosuchnet"},
      {"train --dataset fashion-mnist --data-dir " + dir.str("empty") + " --max-steps 1 --out " + dir.str("o"),
       "empty/train-"},
      {"train --dataset imagenet --max-steps 1 --out " + dir.str("o"), "imagenet"},
      {"train --batch-size 0 --max-steps 1 --out " + dir.str("o"), "--batch-size"},
      {"train --optimizer lbfgs --max-steps 1 --out " + dir.str("o"), "lbfgs"},
      {"train --lr-schedule piecewise --lr-boundaries 10 --max-steps 1 --out " + dir.str("o"), "--lr-values"},
      {"eval --checkpoint " + dir.str("garbage.ckpt"), "garbage.ckpt"},
      {"eval --checkpoint " + dir.str("none.ckpt"), "none.ckpt"},
  };
  for (const auto& c : cases) {
    auto run = runTandem(c.args);
    EXPECT_EQ(run.exit_code, 2) << c.args << "\n" << run.output;
    EXPECT_NE(run.output.find(c.expect), std::string::npos) << c.args << "\n" << run.output;
    EXPECT_EQ(run.output.find("terminate called"), std::string::npos) << run.output;
  }
}

TEST(CliErrors, TruncatedDatasetFileIsNamed) {
  TempDir dir;
  // An IDX image file whose header promises 100 images but holds 3 bytes of pixels.
  std::string header = {0, 0, 8, 3, 0, 0, 0, 100, 0, 0, 0, 28, 0, 0, 0, 28, 1, 2, 3};
  std::ofstream(dir.path() / "train-images-idx3-ubyte", std::ios::binary) << header;
  std::string labels = {0, 0, 8, 1, 0, 0, 0, 100};
  std::ofstream(dir.path() / "train-labels-idx1-ubyte", std::ios::binary) << labels;
  auto run = runTandem("train --dataset mnist-idx --data-dir " + dir.str() + " --max-steps 1 --out " + dir.str("o"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("train-images-idx3-ubyte"), std::string::npos) << run.output;
}

TEST(CliModels, ListsEveryModelWithParameterCounts) {
  auto run = runTandem("models");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* name : {"mlp", "cnn", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "alexnet",
                           "inception_v3", "resnet50", "resnet152"}) {
    EXPECT_NE(run.output.find(name), std::string::npos) << name;
  }
  EXPECT_NE(run.output.find("25557032"), std::string::npos) << run.output;  // resnet50
  EXPECT_NE(run.output.find("61100840"), std::string::npos) << run.output;  // alexnet
}

TEST(CliErrors, LaunchRejectsBadArgumentsAndNamesThem) {
  struct Case {
    std::string args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"launch --workers 0 -- --max-steps 1", "--workers"},
      {"launch --workers 2 -- --task_index 1", "--task-index"},
      {"launch --workers 2 --ps -1 -- --max-steps 1", "--ps"},
      {"launch --workers 1 --ps 1 -- --ps_hosts 127.0.0.1:5", "--ps-hosts"},
      // The binary's wiring, once each for a flag's value, the config's
      // checks and the cluster's; flags_train_test.cpp parses the rest in-process.
      {"train --hierarchical sometimes", "--hierarchical"},
      {"train --accumulate 0", "--accumulate"},
      {"train --worker_hosts 127.0.0.1:1 --job_name worker --task_index 3", "--task_index"},
  };
  for (const auto& c : cases) {
    auto run = runTandem(c.args);
    EXPECT_EQ(run.exit_code, 2) << c.args << "\n" << run.output;
    EXPECT_NE(run.output.find(c.needle), std::string::npos) << c.args << "\n" << run.output;
  }
}

// summary.json names what ran: LibTorch's version, its CUDA build, and the
// BLAS its build settings name (the wheel's MKL lives inside libtorch_cpu,
// where no sgemm_ symbol is visible); and no false "slow BLAS" warning.
TEST(CliBlas, NamesLibTorchItsCudaBuildAndItsOwnBlasWithoutAFalseWarning) {
  TempDir dir;
  auto run = runTandem("train " + testing::syntheticTrainArgs("mlp", 16, dir.str("run"), "--max-steps 1"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto summary = nlohmann::json::parse(readFile(dir.path() / "run" / "summary.json"));
  const auto runtime = train::runtimeInfo(captureEnvironment());
  EXPECT_EQ(summary["libtorch"], runtime.libtorch);
  if (runtime.cuda_build.empty()) {
    EXPECT_TRUE(summary["cuda"].is_null()) << summary["cuda"];
  } else {
    EXPECT_EQ(summary["cuda"]["build"], runtime.cuda_build);
  }
  const auto blas = summary["blas"].get<std::string>();
  ASSERT_FALSE(runtime.blas.empty());
  EXPECT_EQ(blas.rfind(runtime.blas, 0), 0u) << blas << " does not start with LibTorch's BLAS_INFO " << runtime.blas;
  EXPECT_EQ(run.output.find("not an optimised"), std::string::npos) << run.output;
}

TEST(CliHelp, EverySubcommandHasHelp) {
  for (const char* sub : {"train", "eval", "models", "launch", "bench allreduce", "bench ps-apply"}) {
    auto run = runTandem(std::string(sub) + " --help");
    EXPECT_EQ(run.exit_code, 0) << sub;
    EXPECT_NE(run.output.find("--help"), std::string::npos) << sub << run.output;
  }
}

}  // namespace
}  // namespace tandem
