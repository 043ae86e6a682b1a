// End-to-end tests of synchronous all-reduce training: real `tandem launch`
// and `tandem train` processes on loopback.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <thread>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::checkpointParameters;
using testing::readFile;
using testing::runCommand;
using testing::runTandem;
using testing::TempDir;

using testing::maxRelativeDifference;
using testing::syntheticTrainArgs;

std::string trainArgs(const std::string& model, int64_t batch, const std::string& out, const std::string& extra = "") {
  return syntheticTrainArgs(model, batch, out, "--optimizer sgd --lr 0.01 --momentum 0.9 " + extra);
}

class Launch : public ::testing::Test {
 protected:
  TempDir dir_;
};

// 2 workers with batch B on the two halves of each global batch take the
// same steps as 1 process with batch 2B, and stay identical to each other.
void expectTwoWorkersMatchCombinedBatch(const TempDir& dir, const std::string& model, const std::string& extra = "") {
  const std::string steps = "--max-steps 50 --verify-replicas-every 1 " + extra;
  auto two = runTandem("launch --workers 2 -- " + trainArgs(model, 16, dir.str("two"), steps));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto one = runTandem("train " + trainArgs(model, 32, dir.str("one"), "--max-steps 50 " + extra));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto distributed = checkpointParameters(dir.str("two/checkpoint.ckpt"));
  auto single = checkpointParameters(dir.str("one/checkpoint.ckpt"));
  double difference = maxRelativeDifference(distributed, single);
  EXPECT_LT(difference, 1e-5) << model;
  // The runs really moved: 50 steps end far from where 1 step does.
  auto fresh = runTandem("train " + trainArgs(model, 32, dir.str("fresh"), "--max-steps 1 " + extra));
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_GT(maxRelativeDifference(single, checkpointParameters(dir.str("fresh/checkpoint.ckpt"))), 1e-2);
  auto summary = nlohmann::json::parse(readFile(dir.path() / "two" / "summary.json"));
  EXPECT_EQ(summary["mode"], "allreduce");
  EXPECT_EQ(summary["workers"], 2);
  EXPECT_EQ(summary["global_batch_size"], 32);
  EXPECT_EQ(summary["strategy"]["collective"], "summed by Gloo") << summary["strategy"].dump();
  EXPECT_TRUE(summary["step_breakdown"].contains("exposed_comm"));
  EXPECT_TRUE(summary["step_breakdown"].contains("wait_workers"));
  // Worker 1 keeps its own metrics beside worker 0's run directory.
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "two" / "workers" / "worker-1" / "summary.json"));
}

TEST_F(Launch, TwoWorkersReproduceCombinedBatchMlp) { expectTwoWorkersMatchCombinedBatch(dir_, "mlp"); }

TEST_F(Launch, TwoWorkersReproduceCombinedBatchCnnWithoutBatchNorm) {
  expectTwoWorkersMatchCombinedBatch(dir_, "cnn_nobn");
}

// Channels-last parameters keep their layout through the buckets: the
// gradient slots take each parameter's strides.
TEST_F(Launch, TwoWorkersReproduceCombinedBatchChannelsLast) {
  expectTwoWorkersMatchCombinedBatch(dir_, "cnn_nobn", "--channels-last");
  EXPECT_EQ(nlohmann::json::parse(readFile(dir_.path() / "two" / "summary.json"))["channels_last"], true);
}

TEST_F(Launch, AccumulationMatchesTheLargerBatch) {
  // 2 workers x 2 micro-batches of 8 == 1 process with batch 32.
  auto two = runTandem("launch --workers 2 -- " +
                       trainArgs("mlp", 8, dir_.str("acc"), "--max-steps 20 --accumulate 2 --bucket-mb 0.01"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto one = runTandem("train " + trainArgs("mlp", 32, dir_.str("one"), "--max-steps 20"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // Micro-batch order differs from one big batch only in summation order.
  EXPECT_LT(maxRelativeDifference(checkpointParameters(dir_.str("acc/checkpoint.ckpt")),
                                  checkpointParameters(dir_.str("one/checkpoint.ckpt"))),
            1e-5);
}

TEST_F(Launch, OneWorkerReproducesStandaloneExactly) {
  auto launched = runTandem("launch --workers 1 -- " + trainArgs("mlp", 32, dir_.str("launched"), "--max-steps 30"));
  ASSERT_EQ(launched.exit_code, 0) << launched.output;
  auto standalone = runTandem("train " + trainArgs("mlp", 32, dir_.str("standalone"), "--max-steps 30"));
  ASSERT_EQ(standalone.exit_code, 0) << standalone.output;
  auto a = checkpointParameters(dir_.str("launched/checkpoint.ckpt"));
  auto b = checkpointParameters(dir_.str("standalone/checkpoint.ckpt"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "parameter " << i;
  EXPECT_NE(launched.output.find("[worker 0]"), std::string::npos) << launched.output;
}

TEST_F(Launch, DistributedResumeContinuesTheExactTrajectory) {
  // SGD momentum (the default), AdamW and RMSprop with all three slots: the
  // fused kernels' state goes through torch::optim's checkpoint format.
  const std::vector<std::string> optimizers = {"--optimizer sgd --lr 0.01 --momentum 0.9", "--optimizer adamw --lr 0.002",
                                               "--optimizer rmsprop --lr 0.001 --momentum 0.5 --rmsprop-centered"};
  for (size_t k = 0; k < optimizers.size(); ++k) {
    const std::string full_dir = dir_.str("full" + std::to_string(k)), resumed_dir = dir_.str("resumed" + std::to_string(k));
    auto full = runTandem("launch --workers 2 -- " +
                          syntheticTrainArgs("mlp", 16, full_dir, "--max-steps 20 --checkpoint-every 10 " + optimizers[k]));
    ASSERT_EQ(full.exit_code, 0) << full.output;
    auto resumed = runTandem("launch --workers 2 -- " +
                             syntheticTrainArgs("mlp", 16, resumed_dir,
                                                "--max-steps 20 --resume " + full_dir + "/checkpoints/step-10.ckpt"));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    auto a = checkpointParameters(full_dir + "/checkpoint.ckpt");
    auto b = checkpointParameters(resumed_dir + "/checkpoint.ckpt");
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << optimizers[k] << " parameter " << i;
  }
}

TEST_F(Launch, TorchrunEnvironmentFormsACluster) {
  const int port = testing::freePort();
  auto worker = [&](int rank) {
    return fmt::format("RANK={} WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={} {} train {} >{} 2>&1", rank, port,
                       TANDEM_BINARY, trainArgs("mlp", 16, dir_.str("env"), "--max-steps 5"),
                       dir_.str(fmt::format("log{}", rank)));
  };
  auto run = runCommand(worker(1) + " & " + worker(0) + "; code=$?; wait $! || exit 1; exit $code");
  ASSERT_EQ(run.exit_code, 0) << readFile(dir_.path() / "log0") << readFile(dir_.path() / "log1");
  auto summary = nlohmann::json::parse(readFile(dir_.path() / "env" / "summary.json"));
  EXPECT_EQ(summary["workers"], 2);
  EXPECT_EQ(summary["steps"], 5);
}

TEST_F(Launch, ShowsOneProgressLineForTheWholeJob) {
  // Without --progress, launch shows the job's progress, not each worker's.
  auto args = [&](const std::string& out) {
    std::string a = trainArgs("mlp", 16, dir_.str(out));
    return a.erase(a.find("--progress plain"), std::string("--progress plain").size());
  };
  // Not a terminal: a plain job line when due and once at the end.
  auto run = runTandem("launch --workers 2 -- " + args("plain") + " --max-steps 30");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("[launch] job: step 30/30 (100%) | 2 worker(s)"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("@tandem-progress"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("] step 30/30"), std::string::npos) << run.output;  // a worker's own line
  EXPECT_EQ(run.output.find("(100%)"), run.output.rfind("(100%)")) << run.output;
  // On a terminal (a real pty from script(1)): one line redrawn in place.
  if (runCommand("command -v script").exit_code != 0) GTEST_SKIP() << "script(1) is not installed";
  auto live = runCommand(fmt::format("script -qfec '{} launch --workers 2 -- {} --max-steps 300' /dev/null",
                                     TANDEM_BINARY, args("live")));
  ASSERT_EQ(live.exit_code, 0) << live.output;
  EXPECT_NE(live.output.find("\r\033[Kjob: step"), std::string::npos) << live.output;
  EXPECT_NE(live.output.find("job: step 300/300 (100%)"), std::string::npos) << live.output;
  EXPECT_EQ(live.output.find("[launch] job:"), std::string::npos) << live.output;
}

TEST_F(Launch, KilledWorkerStopsTheRestAndIsNamed) {
  const std::string out = dir_.str("run");
  pid_t pid = testing::spawnTandem("launch --workers 2 --grace 5 -- " + trainArgs("mlp", 16, out, "--max-steps 1000000"),
                                   dir_.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, std::filesystem::path(out) / "workers" / "worker-1" / "metrics.jsonl",
                                     std::chrono::seconds(60)))
      << readFile(dir_.path() / "log");
  runCommand("pkill -KILL -f '" + out + ".*--task-index 1'");
  int code = testing::waitForExit(pid, std::chrono::seconds(60));
  std::string log = readFile(dir_.path() / "log");
  EXPECT_NE(code, 0) << log;
  EXPECT_NE(code, -1) << "launch did not exit within 60 s:\n" << log;
  EXPECT_NE(log.find("worker 1"), std::string::npos) << log;
  EXPECT_NE(log.find("signal 9"), std::string::npos) << log;
}

TEST_F(Launch, SigtermIsForwardedAndEveryWorkerStopsAtTheSameStep) {
  const std::string out = dir_.str("run");
  pid_t pid = testing::spawnTandem("launch --workers 2 -- " + trainArgs("mlp", 16, out, "--max-steps 1000000"),
                                   dir_.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, std::filesystem::path(out) / "metrics.jsonl", std::chrono::seconds(60)))
      << readFile(dir_.path() / "log");
  ::kill(pid, SIGTERM);
  int code = testing::waitForExit(pid, std::chrono::seconds(60));
  EXPECT_EQ(code, 130) << readFile(dir_.path() / "log");
  auto chief = nlohmann::json::parse(readFile(std::filesystem::path(out) / "summary.json"));
  auto other = nlohmann::json::parse(readFile(std::filesystem::path(out) / "workers" / "worker-1" / "summary.json"));
  EXPECT_TRUE(chief["interrupted"].get<bool>());
  EXPECT_EQ(chief["steps"], other["steps"]);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(out) / "checkpoint.ckpt"));
}

// A scheduler's preemption warning (Slurm's --signal=USR1, Kubernetes'
// SIGTERM) reaches one task, not the launcher: every worker stops after the
// same step, worker 0 checkpoints it, launch exits 130, and the same command
// run again resumes from that checkpoint.
TEST_F(Launch, APreemptionSignalToOneTaskStopsTheJobWithACheckpointTheSameCommandResumes) {
  const std::string out = dir_.str("run");
  const std::string command = "launch --workers 2 -- " + trainArgs("mlp", 16, out, "--max-steps 100000");
  pid_t pid = testing::spawnTandem(command, dir_.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, std::filesystem::path(out) / "workers" / "worker-1" / "metrics.jsonl",
                                     std::chrono::seconds(60)))
      << readFile(dir_.path() / "log");
  runCommand("pkill -USR1 -f -- '--out " + out + " .*--job-name worker --task-index 1( |$)'");
  int code = testing::waitForExit(pid, std::chrono::seconds(60));
  const std::string log = readFile(dir_.path() / "log");
  ASSERT_EQ(code, 130) << log;
  EXPECT_NE(log.find("stopped by signal; worker 0 saved a checkpoint"), std::string::npos) << log;
  auto chief = nlohmann::json::parse(readFile(std::filesystem::path(out) / "summary.json"));
  auto other = nlohmann::json::parse(readFile(std::filesystem::path(out) / "workers" / "worker-1" / "summary.json"));
  EXPECT_TRUE(chief["interrupted"].get<bool>()) << chief;
  EXPECT_EQ(chief["steps"], other["steps"]);
  const int64_t stopped_at = chief["steps"].get<int64_t>();
  EXPECT_EQ(testing::checkpointGlobalStep((std::filesystem::path(out) / "checkpoint.ckpt").string()), stopped_at);

  // Requeued: the same command, with a step budget that ends it soon.
  auto resumed = runTandem("launch --workers 2 -- " +
                           trainArgs("mlp", 16, out, fmt::format("--max-steps {}", stopped_at + 3)));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(fmt::format("at step {}", stopped_at)), std::string::npos) << resumed.output;
  EXPECT_EQ(nlohmann::json::parse(readFile(std::filesystem::path(out) / "summary.json"))["trained_steps"], 3);
}

TEST_F(Launch, MissingTaskIsNamedWithinTheRendezvousDeadline) {
  const int port = testing::freePort();
  auto start = std::chrono::steady_clock::now();
  auto run = runTandem(fmt::format("train {} --worker_hosts 127.0.0.1:{},127.0.0.1:{} --job_name worker "
                                   "--task_index 0 --rendezvous-timeout 2",
                                   trainArgs("mlp", 16, dir_.str("run"), "--max-steps 5"), port, port + 1));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("worker 1 never arrived"), std::string::npos) << run.output;
  EXPECT_LT(seconds, 20) << run.output;
}

TEST_F(Launch, FingerprintMismatchFailsEveryWorker) {
  const int port = testing::freePort();
  const std::string hosts = fmt::format("127.0.0.1:{},127.0.0.1:{}", port, testing::freePort());
  auto worker = [&](int rank, int batch) {
    return testing::spawnTandem(fmt::format("train {} --worker_hosts {} --job_name worker --task_index {} "
                                            "--rendezvous-timeout 20",
                                            trainArgs("mlp", batch, dir_.str(fmt::format("run{}", rank)),
                                                      "--max-steps 5"),
                                            hosts, rank),
                                dir_.str(fmt::format("log{}", rank)));
  };
  pid_t w0 = worker(0, 16);
  pid_t w1 = worker(1, 32);
  int c0 = testing::waitForExit(w0, std::chrono::seconds(60));
  int c1 = testing::waitForExit(w1, std::chrono::seconds(60));
  for (auto [code, log] : {std::pair{c0, std::string("log0")}, std::pair{c1, std::string("log1")}}) {
    std::string text = readFile(dir_.path() / log);
    EXPECT_EQ(code, 2) << text;
    EXPECT_NE(text.find("batch_size"), std::string::npos) << text;
    EXPECT_NE(text.find("16"), std::string::npos) << text;
    EXPECT_NE(text.find("32"), std::string::npos) << text;
  }
}

TEST(BenchAllreduce, ReportsExactResultsAndBandwidthAgainstLoopback) {
  TempDir dir;
  auto run = runTandem("bench allreduce --workers 2 --sizes 4K..64K --json " + dir.str("bench.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("busbw"), std::string::npos) << run.output;
  auto results = nlohmann::json::parse(readFile(dir.path() / "bench.json"));
  EXPECT_GT(results["loopback_tcp_gbps"].get<double>(), 0);
  ASSERT_EQ(results["rows"].size(), 3u);  // 4K, 16K, 64K
  for (const auto& row : results["rows"]) {
    EXPECT_TRUE(row["exact"].get<bool>());
    EXPECT_GT(row["busbw_gbps"].get<double>(), 0);
    // busbw = algbw * 2(n-1)/n, which is algbw itself for n = 2.
    EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(), row["algbw_gbps"].get<double>());
  }
  auto bad = runTandem("bench allreduce --workers 2 --sizes 6");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--sizes"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace tandem
