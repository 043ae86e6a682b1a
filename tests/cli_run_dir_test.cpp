// Run directories as TensorFlow's model_dir: reruns resume, other runs are
// refused, checkpoints of an abandoned trajectory go, and --resume needs no
// repeated flags. Real processes on synthetic data.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using testing::expectSameParameters;
using testing::readFile;
using testing::runCommand;
using testing::runTandem;
using testing::TempDir;
using testing::trainLosses;

std::string args(const std::string& out, const std::string& extra) {
  return "train " + testing::syntheticTrainArgs("mlp", 16, out, "--optimizer sgd --lr 0.01 --momentum 0.9 " + extra);
}

std::vector<std::string> checkpointFiles(const fs::path& out) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out / "checkpoints", ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<nlohmann::json> metricLines(const fs::path& out) { return testing::jsonLines(out / "metrics.jsonl"); }

class RunDir : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(RunDir, RerunResumesFromTheNewestCheckpointAndAppendsMetrics) {
  const std::string out = dir_.str("run");
  ASSERT_EQ(runTandem(args(out, "--max-steps 20")).exit_code, 0);
  EXPECT_EQ(readFile(fs::path(out) / "checkpoints" / "latest"), "checkpoint.ckpt\n");
  // The same command with a longer run continues from step 20.
  auto longer = runTandem(args(out, "--max-steps 40"));
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_NE(longer.output.find("resumed from"), std::string::npos) << longer.output;
  auto summary = nlohmann::json::parse(readFile(fs::path(out) / "summary.json"));
  EXPECT_EQ(summary["steps"], 40);
  EXPECT_EQ(summary["trained_steps"], 20);
  std::vector<std::string> kinds;
  for (const auto& line : metricLines(out)) kinds.push_back(fmt::format("{} {}", line["type"].get<std::string>(),
                                                                        line["step"].get<int64_t>()));
  EXPECT_EQ(kinds, (std::vector<std::string>{"train 10", "train 20", "eval 20", "resume 20", "train 30", "train 40",
                                             "eval 40"}));
  // Exactly the 40-step run.
  ASSERT_EQ(runTandem(args(dir_.str("straight"), "--max-steps 40")).exit_code, 0);
  expectSameParameters(out + "/checkpoint.ckpt", dir_.str("straight/checkpoint.ckpt"));
  // A rerun of a finished run has nothing to do and says so.
  auto again = runTandem(args(out, "--max-steps 40"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("nothing to do"), std::string::npos) << again.output;
  EXPECT_EQ(metricLines(out).size(), 7u);
}

TEST_F(RunDir, ARerunOfAFinishedPsJobEndsAtOnceServersToo) {
  const std::string launch = "launch --ps 1 --workers 2 -- ";
  const std::string out = dir_.str("run");
  ASSERT_EQ(runTandem(launch + args(out, "--max-steps 20 --ps-mode async")).exit_code, 0);
  const auto started = std::chrono::steady_clock::now();
  auto again = runTandem(launch + args(out, "--max-steps 20 --ps-mode async"), std::chrono::seconds(120));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("nothing to do"), std::string::npos) << again.output;
  // The server is told the workers are done; it does not wait out its startup timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30)) << again.output;
  EXPECT_EQ(nlohmann::json::parse(readFile(fs::path(out) / "summary.json"))["global_step"], 20);
}

// The fused Adam keeps its state in torch::optim's format: a checkpoint at
// 10 resumed to 20 ends where 20 straight steps do, bit for bit.
TEST_F(RunDir, FusedAdamResumesExactly) {
  const std::string adam = "train " + testing::syntheticTrainArgs("mlp", 16, "{}", "--optimizer adam --lr 1e-3 ");
  auto at = [&](const std::string& out, const std::string& extra) {
    return fmt::format(fmt::runtime(adam), out) + extra;
  };
  ASSERT_EQ(runTandem(at(dir_.str("straight"), "--max-steps 20")).exit_code, 0);
  ASSERT_EQ(runTandem(at(dir_.str("split"), "--max-steps 10")).exit_code, 0);
  auto rest = runTandem(at(dir_.str("split"), "--max-steps 20"));  // the same run, longer: resumes
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  expectSameParameters(dir_.str("straight/checkpoint.ckpt"), dir_.str("split/checkpoint.ckpt"));
  auto summary = nlohmann::json::parse(readFile(fs::path(dir_.str("split")) / "summary.json"));
  EXPECT_EQ(summary["trained_steps"], 10);
  // Steady state, after the warm-up steps: with freed memory kept by the
  // allocator a step maps nothing new (0 is a true answer); a step that
  // mapped its gradients afresh would cost thousands.
  const double faults = summary["minor_faults_per_step"].get<double>();
  EXPECT_GE(faults, 0.0);
  EXPECT_LT(faults, 1000.0);
}

TEST_F(RunDir, ADifferentRunIsRefusedUntilOverwrite) {
  const std::string out = dir_.str("run");
  ASSERT_EQ(runTandem(args(out, "--max-steps 10")).exit_code, 0);
  auto other = runTandem(args(out, "--max-steps 10 --seed 9"));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("--out " + out + ": holds a different run: seed differs: stored 42, this run 9"),
            std::string::npos)
      << other.output;
  auto overwritten = runTandem(args(out, "--max-steps 10 --seed 9 --overwrite"));
  ASSERT_EQ(overwritten.exit_code, 0) << overwritten.output;
  EXPECT_EQ(metricLines(out).size(), 2u);  // train 10 and eval 10: the old run's lines are gone with it
  EXPECT_EQ(nlohmann::json::parse(readFile(fs::path(out) / "run.json"))["seed"], 9);
}

TEST_F(RunDir, ResumeTakesTheStoredFlagsAndRefusesDisagreeingOnes) {
  const std::string full = dir_.str("full");
  ASSERT_EQ(runTandem(args(full, "--max-steps 20 --checkpoint-every 10 --nesterov --weight-decay 1e-4")).exit_code, 0);
  const std::string step10 = full + "/checkpoints/step-10.ckpt";
  // No flags but the checkpoint and a new --out: the same trajectory. The
  // thread count is this host's, planned anew on resume rather than stored,
  // and BLAS sums split across 2 threads differ in the last bits from 1
  // (OpenBLAS's Haswell kernels here), so the test fixes it as the run did.
  auto bare = runTandem("train --progress plain --threads 1 --resume " + step10 + " --out " + dir_.str("bare"));
  ASSERT_EQ(bare.exit_code, 0) << bare.output;
  expectSameParameters(full + "/checkpoint.ckpt", dir_.str("bare/checkpoint.ckpt"));
  // A flag that changes the trajectory is refused, naming the field.
  auto wrong = runTandem("train --resume " + step10 + " --batch-size 8 --out " + dir_.str("wrong"));
  EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("batch_size differs: checkpoint has 16, the flags give 8"), std::string::npos)
      << wrong.output;
  // Agreeing flags are fine, and --lr may change (logged).
  auto lr = runTandem("train --resume " + step10 + " --batch-size 16 --lr 0.001 --out " + dir_.str("lr"));
  ASSERT_EQ(lr.exit_code, 0) << lr.output;
  EXPECT_NE(lr.output.find("learning rate changed from 0.01 to 0.001"), std::string::npos) << lr.output;
}

TEST_F(RunDir, RestartingEarlierRemovesTheAbandonedTrajectorysCheckpoints) {
  const std::string out = dir_.str("run");
  ASSERT_EQ(runTandem(args(out, "--max-steps 30 --checkpoint-every 10")).exit_code, 0);
  EXPECT_EQ(checkpointFiles(out), (std::vector<std::string>{"latest", "step-10.ckpt", "step-20.ckpt"}));
  auto restart = runTandem("train --progress plain --resume " + out + "/checkpoints/step-10.ckpt --max-steps 15 "
                           "--checkpoint-every 0 --out " + out);
  ASSERT_EQ(restart.exit_code, 0) << restart.output;
  EXPECT_EQ(checkpointFiles(out), (std::vector<std::string>{"latest", "step-10.ckpt"}));
  auto meta = nlohmann::json::parse(readFile(fs::path(out) / "summary.json"));
  EXPECT_EQ(meta["steps"], 15);
}

TEST_F(RunDir, PeriodicCheckpointsByTimeKeepTheNewest) {
  const std::string out = dir_.str("run");
  auto run = runTandem(args(out, "--max-steps 8 --checkpoint-secs 0.000001 --keep-checkpoints 3"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(checkpointFiles(out),
            (std::vector<std::string>{"latest", "step-5.ckpt", "step-6.ckpt", "step-7.ckpt"}));
}

TEST_F(RunDir, AClosedOutputPipeDoesNotStopTheRun) {
  const std::string out = dir_.str("run");
  auto run = runCommand(fmt::format("bash -c 'set -o pipefail; {} {} 2>&1 | head -c 1 >/dev/null'", TANDEM_BINARY,
                                    args(out, "--max-steps 30")));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(fs::exists(fs::path(out) / "checkpoint.ckpt"));
  EXPECT_EQ(trainLosses(out).size(), 3u);
}

}  // namespace
}  // namespace tandem
