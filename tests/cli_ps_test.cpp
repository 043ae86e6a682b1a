// End-to-end tests of parameter-server training: real `tandem launch` and
// `tandem train` processes (PS tasks and workers) on loopback.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <functional>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::checkpointParameters;
using testing::maxAbsoluteDifference;
using testing::maxRelativeDifference;
using testing::readFile;
using testing::runTandem;
using testing::summaryOf;
using testing::syntheticTrainArgs;
using testing::TempDir;


class PsTraining : public ::testing::Test {
 protected:
  TempDir dir_;

  // 1 PS + 1 worker in sync mode against standalone training, same seed.
  void expectOneWorkerMatchesStandalone(const std::string& optimizer) {
    const std::string args = "--max-steps 50 --seed 5 " + optimizer;
    auto ps = runTandem("launch --ps 1 --workers 1 -- " + syntheticTrainArgs("mlp", 32, dir_.str("ps"), args));
    ASSERT_EQ(ps.exit_code, 0) << ps.output;
    auto alone = runTandem("train " + syntheticTrainArgs("mlp", 32, dir_.str("alone"), args));
    ASSERT_EQ(alone.exit_code, 0) << alone.output;
    auto a = checkpointParameters(dir_.str("ps/checkpoint.ckpt"));
    auto b = checkpointParameters(dir_.str("alone/checkpoint.ckpt"));
    EXPECT_LT(maxAbsoluteDifference(a, b), 1e-6) << optimizer;
    // The run moved well beyond that tolerance.
    auto start = runTandem("train " + syntheticTrainArgs("mlp", 32, dir_.str("start"), "--max-steps 1 --seed 5 " +
                                                                                             optimizer));
    ASSERT_EQ(start.exit_code, 0) << start.output;
    EXPECT_GT(maxAbsoluteDifference(b, checkpointParameters(dir_.str("start/checkpoint.ckpt"))), 1e-2);

    auto summary = summaryOf(dir_.path() / "ps");
    EXPECT_EQ(summary["mode"], "ps-sync");
    EXPECT_EQ(summary["servers"], 1);
    EXPECT_TRUE(summary["step_breakdown"].contains("exposed_comm"));
    auto server = summaryOf(dir_.path() / "ps" / "ps" / "ps-0");
    EXPECT_EQ(server["chunk_updates"].get<int>(), 50 * server["chunks"].get<int>());
    EXPECT_EQ(server["model_updates"], 50);
    EXPECT_EQ(server["global_step"], 50);
    EXPECT_TRUE(server["lost_workers"].empty());
  }
};

// One optimizer implementation everywhere: standalone runs the servers'
// kernels, so 1 PS + 1 worker is the same computation, bit for bit, even on
// a BatchNorm model with momentum and a piecewise schedule.
TEST_F(PsTraining, OnePsOneWorkerSyncIsBitIdenticalToStandaloneOnCnn) {
  const std::string extra = "--optimizer sgd --momentum 0.9 --lr 0.1 --lr-schedule piecewise --lr-boundaries 40,70 "
                            "--lr-values 0.1,0.01,0.001 --max-steps 100 --seed 11";
  auto ps = runTandem("launch --ps 1 --workers 1 -- " + syntheticTrainArgs("cnn", 32, dir_.str("ps"), extra));
  ASSERT_EQ(ps.exit_code, 0) << ps.output;
  auto alone = runTandem("train " + syntheticTrainArgs("cnn", 32, dir_.str("alone"), extra));
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  const auto a = testing::trainLosses(dir_.str("ps"));
  const auto b = testing::trainLosses(dir_.str("alone"));
  ASSERT_EQ(a.size(), 10u);
  EXPECT_LT(a.back(), a.front());  // it trained
  EXPECT_EQ(a, b);
  testing::expectSameParameters(dir_.str("ps/checkpoint.ckpt"), dir_.str("alone/checkpoint.ckpt"));
  // By way of the worker's shared memory: its server is on this host.
  EXPECT_EQ(summaryOf(dir_.str("ps"))["strategy"]["shared_memory_servers"], 1);
}

// Shared memory changes where the bytes travel, never what they are: two
// servers and two sync workers end bit-identical with it on and off, and
// the servers say which way the bytes went.
TEST_F(PsTraining, SharedMemoryOnAndOffTrainBitIdentically) {
  const std::string args = "--max-steps 12 --optimizer adam --lr 0.002 --ps-chunk-mb 0.01 --seed 5";
  for (const std::string mode : {"on", "off"}) {
    auto run = runTandem("launch --ps 2 --workers 2 -- " + syntheticTrainArgs("mlp", 16, dir_.str(mode), args) +
                         " --ps-shared-memory " + mode);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(summaryOf(dir_.str(mode))["strategy"]["shared_memory_servers"], mode == "on" ? 2 : 0);
    // On: the servers write pulls straight into the model, which the
    // bit-identity below then checks.
    EXPECT_EQ(summaryOf(dir_.str(mode))["strategy"]["parameters_in_shared_memory"], mode == "on");
    for (const char* ps : {"ps-0", "ps-1"}) {
      const auto server = summaryOf(dir_.path() / mode / "ps" / ps);
      // 12 steps x 2 workers, each pushing and pulling every chunk once a step.
      EXPECT_EQ(server["shared_memory_bytes_in"] == server["bytes_in"], mode == "on") << ps << " " << server.dump();
      EXPECT_EQ(server["shared_memory_bytes_out"] == 0, mode == "off") << ps << " " << server.dump();
      EXPECT_GT(server["bytes_in"].get<uint64_t>(), 0u);
    }
  }
  EXPECT_EQ(testing::trainLosses(dir_.str("on")), testing::trainLosses(dir_.str("off")));
  testing::expectSameParameters(dir_.str("on/checkpoint.ckpt"), dir_.str("off/checkpoint.ckpt"));
}

TEST_F(PsTraining, OnePsOneWorkerSyncReproducesStandaloneAdam) {
  expectOneWorkerMatchesStandalone("--optimizer adam --lr 0.002");
}

TEST_F(PsTraining, OnePsOneWorkerSyncReproducesStandaloneSgdMomentum) {
  expectOneWorkerMatchesStandalone("--optimizer sgd --lr 0.02 --momentum 0.9 --nesterov --weight-decay 0.0005");
}

TEST_F(PsTraining, OnePsOneWorkerSyncReproducesStandaloneAdamW) {
  expectOneWorkerMatchesStandalone("--optimizer adamw --lr 0.002 --weight-decay 0.05");
}

TEST_F(PsTraining, OnePsOneWorkerSyncReproducesStandaloneRmsPropCenteredWithMomentum) {
  expectOneWorkerMatchesStandalone("--optimizer rmsprop --lr 0.001 --momentum 0.5 --rmsprop-centered");
}

TEST_F(PsTraining, TwoPsTwoWorkersSyncReproduceTwoWorkerAllReduce) {
  // Small chunks spread every tensor over both servers.
  const std::string args = "--max-steps 40 --optimizer sgd --lr 0.02 --momentum 0.9 --ps-chunk-mb 0.01";
  auto ps = runTandem("launch --ps 2 --workers 2 -- " + syntheticTrainArgs("mlp", 16, dir_.str("ps"), args));
  ASSERT_EQ(ps.exit_code, 0) << ps.output;
  auto ar = runTandem("launch --workers 2 -- " + syntheticTrainArgs("mlp", 16, dir_.str("ar"), args));
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  EXPECT_LT(maxRelativeDifference(checkpointParameters(dir_.str("ps/checkpoint.ckpt")),
                                  checkpointParameters(dir_.str("ar/checkpoint.ckpt"))),
            1e-5);
  // Both servers hold the same bytes within one chunk (2621 floats).
  auto s0 = summaryOf(dir_.path() / "ps" / "ps" / "ps-0");
  auto s1 = summaryOf(dir_.path() / "ps" / "ps" / "ps-1");
  EXPECT_LE(std::abs(s0["floats"].get<int64_t>() - s1["floats"].get<int64_t>()), 2621) << s0 << s1;
  EXPECT_EQ(s1["model_updates"], 40);  // whole-model steps, not chunk updates
  auto worker1 = summaryOf(dir_.path() / "ps" / "workers" / "worker-1");
  EXPECT_EQ(worker1["steps"], 40);
}

// Full Fashion-MNIST epochs (1 PS + 1 worker against standalone, 4 async
// workers): bench/ps_accuracy.sh.

// Starts a PS task and `workers` worker tasks by hand, as a user would on
// several hosts; `extra(rank)` adds per-worker flags.
struct ManualCluster {
  std::vector<pid_t> workers;
  pid_t ps = -1;
};

ManualCluster startCluster(const TempDir& dir, int workers, const std::string& args,
                           const std::function<std::string(int)>& extra) {
  std::vector<std::string> hosts;
  for (int i = 0; i < workers; ++i) hosts.push_back(fmt::format("127.0.0.1:{}", testing::freePort()));
  const std::string cluster = fmt::format("--worker_hosts {} --ps_hosts 127.0.0.1:{}", fmt::join(hosts, ","),
                                          testing::freePort());
  ManualCluster c;
  c.ps = testing::spawnTandem(fmt::format("train {} {} --job_name ps --task_index 0", args, cluster), dir.str("ps.log"));
  for (int i = 0; i < workers; ++i) {
    c.workers.push_back(testing::spawnTandem(
        fmt::format("train {} {} --job_name worker --task_index {} {}", args, cluster, i, extra(i)),
        dir.str(fmt::format("worker{}.log", i))));
  }
  return c;
}

TEST_F(PsTraining, BoundedStalenessIsNeverExceeded) {
  // lr 0.01: at the default 0.05 with momentum 0.9, three stale updaters
  // can diverge (NaN by step 23 in one loaded run), and this test is about
  // the bound, not the optimiser.
  const std::string args = syntheticTrainArgs("mlp", 16, dir_.str("run"), "--max-steps 40 --staleness 2 --lr 0.01");
  auto cluster = startCluster(dir_, 3, args, [](int rank) {
    return rank == 2 ? "--debug-step-delay-ms 40" : "";  // the straggler
  });
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(testing::waitForExit(cluster.workers[static_cast<size_t>(i)], std::chrono::seconds(120)), 0)
        << readFile(dir_.path() / fmt::format("worker{}.log", i));
  }
  EXPECT_EQ(testing::waitForExit(cluster.ps, std::chrono::seconds(60)), 0) << readFile(dir_.path() / "ps.log");
  auto server = summaryOf(dir_.path() / "run" / "ps" / "ps-0");
  EXPECT_EQ(server["mode"], "ps-ssp");  // one spelling: the worker's and the server's
  // The fast workers were held at the bound, and never beyond it.
  EXPECT_EQ(server["max_staleness"], 2) << server;
  auto chief = summaryOf(dir_.path() / "run");
  EXPECT_EQ(chief["mode"], "ps-ssp");
  EXPECT_EQ(chief["strategy"]["max_lead_steps"], 2) << chief["strategy"];
  EXPECT_GT(chief["step_breakdown"]["wait_workers"].get<double>(), 0.005) << chief["step_breakdown"];
  auto straggler = summaryOf(dir_.path() / "run" / "workers" / "worker-2");
  EXPECT_LE(straggler["strategy"]["max_lead_steps"].get<int>(), 2);
}

TEST_F(PsTraining, AsyncTrainingSurvivesAKilledWorker) {
  const std::string args = syntheticTrainArgs("mlp", 16, dir_.str("run"),
                                              "--max-steps 600 --ps-mode async --debug-step-delay-ms 20 "
                                              "--peer-timeout 3 --lr 0.01");
  auto cluster = startCluster(dir_, 3, args, [](int) { return ""; });
  ASSERT_TRUE(testing::waitForOutput(cluster.workers[2], dir_.path() / "run" / "workers" / "worker-2" / "metrics.jsonl",
                                     std::chrono::seconds(60)))
      << readFile(dir_.path() / "worker2.log");
  ::kill(cluster.workers[2], SIGKILL);
  testing::waitForExit(cluster.workers[2], std::chrono::seconds(10));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(testing::waitForExit(cluster.workers[static_cast<size_t>(i)], std::chrono::seconds(120)), 0)
        << readFile(dir_.path() / fmt::format("worker{}.log", i));
  }
  // The survivors make the job's 600 steps (the dead worker's unfinished
  // one, granted before it died, is handed back once the server gives up on it).
  auto chief = summaryOf(dir_.path() / "run");
  EXPECT_GE(chief["global_step"].get<int>(), 599) << chief;
  EXPECT_LE(chief["global_step"].get<int>(), 600) << chief;
  // The server gives up on the dead worker after --peer-timeout and ends cleanly.
  EXPECT_EQ(testing::waitForExit(cluster.ps, std::chrono::seconds(30)), 0) << readFile(dir_.path() / "ps.log");
  auto server = summaryOf(dir_.path() / "run" / "ps" / "ps-0");
  EXPECT_EQ(server["lost_workers"], nlohmann::json::array({2})) << server;
  EXPECT_EQ(server["global_step"], chief["global_step"]);
  EXPECT_NE(readFile(dir_.path() / "ps.log").find("worker 2 has been silent"), std::string::npos);
}

// DC-ASGD end to end: async workers run with both servers correcting
// stale pushes (the arithmetic is ChunkStoreAsync's test), and each server
// states what the per-worker values cost; in sync mode the flag, and
// --staleness-lr on, are bad input naming them. Async interleaving is not
// repeatable, so this asserts no trajectory: a small rate keeps the run
// far from divergence, which would end it with exit 1.
TEST_F(PsTraining, DelayCompensatedAsyncRunsStatesItsMemoryAndSyncRefusesIt) {
  const std::string args =
      "--max-steps 40 --seed 3 --optimizer sgd --lr 0.01 --ps-mode async --delay-compensation 0.04";
  auto run = runTandem("launch --ps 2 --workers 2 -- " + syntheticTrainArgs("mlp", 16, dir_.str("dc"), args));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(summaryOf(dir_.path() / "dc")["mode"], "ps-async");
  int64_t floats = 0;
  for (const char* ps : {"ps-0", "ps-1"}) {
    const auto server = summaryOf(dir_.path() / "dc" / "ps" / ps);
    ASSERT_TRUE(server.contains("delay_compensation")) << server.dump();
    EXPECT_DOUBLE_EQ(server["delay_compensation"]["lambda0"].get<double>(), 0.04);
    // Two workers' pulled values and one mean square per value held.
    EXPECT_EQ(server["delay_compensation"]["bytes"].get<int64_t>(), 3 * 4 * server["floats"].get<int64_t>());
    floats += server["floats"].get<int64_t>();
  }
  EXPECT_GT(floats, 0);
  auto sync = runTandem("launch --ps 1 --workers 1 -- " +
                        syntheticTrainArgs("mlp", 16, dir_.str("sync"), "--max-steps 2 --delay-compensation 0.04"));
  EXPECT_EQ(sync.exit_code, 2) << sync.output;
  EXPECT_NE(sync.output.find("--delay-compensation: needs --ps-mode async"), std::string::npos) << sync.output;
  auto stale = runTandem("launch --ps 1 --workers 1 -- " +
                         syntheticTrainArgs("mlp", 16, dir_.str("sync"), "--max-steps 2 --staleness-lr on"));
  EXPECT_EQ(stale.exit_code, 2) << stale.output;
  EXPECT_NE(stale.output.find("--staleness-lr on: needs --ps-mode async"), std::string::npos) << stale.output;
  auto correction = runTandem("launch --ps 1 --workers 1 -- " +
                              syntheticTrainArgs("mlp", 16, dir_.str("sync"), "--max-steps 2 --ps-mode async "
                                                 "--staleness-lr off --async-momentum-correction on"));
  EXPECT_EQ(correction.exit_code, 2) << correction.output;
  EXPECT_NE(correction.output.find("--async-momentum-correction on: needs staleness-aware rates"), std::string::npos)
      << correction.output;
}

// The constant form (DC-ASGD-c) keeps no mean squares: each server's memory
// is the workers' pulled values alone. The form needs a lambda0.
TEST_F(PsTraining, ConstantDelayCompensationKeepsOnlyThePulledValues) {
  const std::string args = "--max-steps 20 --seed 3 --optimizer sgd --lr 0.01 --ps-mode async "
                           "--delay-compensation 0.04 --delay-compensation-form constant";
  auto run = runTandem("launch --ps 1 --workers 2 -- " + syntheticTrainArgs("mlp", 16, dir_.str("dcc"), args));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto server = summaryOf(dir_.path() / "dcc" / "ps" / "ps-0");
  ASSERT_TRUE(server.contains("delay_compensation")) << server.dump();
  EXPECT_EQ(server["delay_compensation"]["form"], "constant");
  EXPECT_GT(server["floats"].get<int64_t>(), 0);
  EXPECT_EQ(server["delay_compensation"]["bytes"].get<int64_t>(), 2 * 4 * server["floats"].get<int64_t>());
  auto bare = runTandem("launch --ps 1 --workers 1 -- " +
                        syntheticTrainArgs("mlp", 16, dir_.str("bare"),
                                           "--max-steps 2 --ps-mode async --delay-compensation-form constant"));
  EXPECT_EQ(bare.exit_code, 2) << bare.output;
  EXPECT_NE(bare.output.find("--delay-compensation-form: only applies with --delay-compensation"), std::string::npos)
      << bare.output;
  auto unknown = runTandem("launch --ps 1 --workers 1 -- " +
                           syntheticTrainArgs("mlp", 16, dir_.str("bare"),
                                              "--max-steps 2 --ps-mode async --delay-compensation 0.04 "
                                              "--delay-compensation-form linear"));
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("--delay-compensation-form"), std::string::npos) << unknown.output;
}

// Async counts the job's steps: a slowed worker's share goes to the fast
// one, and the checkpoint holds every worker's every update.
TEST_F(PsTraining, AsyncMaxStepsCountsTheJobsUpdatesAndTheCheckpointHasThemAll) {
  // Long enough (about 1.5 s) that the ends of the run do not dominate the rates.
  const std::string args = syntheticTrainArgs("mlp", 16, dir_.str("run"), "--max-steps 300 --ps-mode async --lr 0.01");
  auto cluster = startCluster(dir_, 2, args, [](int rank) {
    return rank == 1 ? "--debug-step-delay-ms 20" : "--debug-step-delay-ms 5";
  });
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(testing::waitForExit(cluster.workers[static_cast<size_t>(i)], std::chrono::seconds(120)), 0)
        << readFile(dir_.path() / fmt::format("worker{}.log", i));
  }
  ASSERT_EQ(testing::waitForExit(cluster.ps, std::chrono::seconds(30)), 0) << readFile(dir_.path() / "ps.log");
  auto chief = summaryOf(dir_.path() / "run");
  auto slow = summaryOf(dir_.path() / "run" / "workers" / "worker-1");
  auto server = summaryOf(dir_.path() / "run" / "ps" / "ps-0");
  const int fast_steps = chief["worker_steps"].get<int>();
  const int slow_steps = slow["worker_steps"].get<int>();
  EXPECT_EQ(fast_steps + slow_steps, 300) << chief << slow;
  EXPECT_GT(fast_steps, 2 * slow_steps) << "the fast worker should carry the slow one's share";
  EXPECT_EQ(chief["global_step"], 300);
  EXPECT_EQ(server["global_step"], 300);
  EXPECT_EQ(server["model_updates"], 300);
  EXPECT_FALSE(chief["interrupted"].get<bool>());
  // Staleness-aware rates are on by default: every chunk update's staleness
  // is counted, and the fast worker's pushes land between the slow one's
  // pull and push.
  EXPECT_EQ(server["staleness_lr"], true) << server;
  EXPECT_EQ(server["push_staleness"]["pushes"], server["chunk_updates"]) << server;
  EXPECT_GE(server["push_staleness"]["max"].get<int>(), 1) << server;
  // So is the momentum correction: SGD's 0.9 applied as (1 - 0.1 (1 + s)).
  const auto& m = server["momentum_correction"];
  EXPECT_EQ(m["setting"], "momentum") << server;
  EXPECT_DOUBLE_EQ(m["given"].get<double>(), 0.9) << server;
  EXPECT_NEAR(m["applied"].get<double>(), 1 - 0.1 * (1 + m["mean_staleness"].get<double>()), 1e-9) << server;
  EXPECT_DOUBLE_EQ(m["mean_staleness"].get<double>(), server["push_staleness"]["mean"].get<double>()) << server;
  // The server's last line says the same, in the summary's figures.
  const std::string said = fmt::format("momentum 0.9 acts as {:.3f} at mean staleness {:.2f}",
                                       m["applied"].get<double>(), m["mean_staleness"].get<double>());
  const std::string ps_log = readFile(dir_.path() / "ps.log");
  EXPECT_NE(ps_log.find(said), std::string::npos) << said << "\n" << ps_log;
  EXPECT_NE(ps_log.find(fmt::format("(p99 {}), each rate divided by its own", server["push_staleness"]["p99"].get<int>())),
            std::string::npos)
      << ps_log;
  EXPECT_EQ(testing::checkpointGlobalStep(dir_.str("run/checkpoint.ckpt")), 300);
  // The job's rate is the sum of the workers' own rates, not the chief's times two.
  const double job = chief["samples_per_sec"].get<double>();
  const double sum = chief["worker_samples_per_sec"].get<double>() + slow["worker_samples_per_sec"].get<double>();
  EXPECT_NEAR(job, sum, 0.1 * sum) << chief << slow;
  EXPECT_LT(job, 1.5 * chief["worker_samples_per_sec"].get<double>()) << chief;
}

TEST_F(PsTraining, LaunchCarriesOnWithoutADeadAsyncWorker) {
  const std::string out = dir_.str("run");
  pid_t pid = testing::spawnTandem("launch --ps 1 --workers 3 -- " +
                                       syntheticTrainArgs("mlp", 16, out, "--max-steps 600 --ps-mode async --lr 0.01 "
                                                                          "--debug-step-delay-ms 20 --peer-timeout 3"),
                                   dir_.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, std::filesystem::path(out) / "workers" / "worker-2" / "metrics.jsonl",
                                     std::chrono::seconds(60)))
      << readFile(dir_.path() / "log");
  testing::runCommand("pkill -KILL -f '" + out + ".*--task-index 2'");
  EXPECT_EQ(testing::waitForExit(pid, std::chrono::seconds(120)), 0) << readFile(dir_.path() / "log");
  const std::string log = readFile(dir_.path() / "log");
  EXPECT_NE(log.find("worker 2"), std::string::npos) << log;
  EXPECT_NE(log.find("training went on without it"), std::string::npos) << log;
  EXPECT_GE(summaryOf(out)["global_step"].get<int>(), 599);
}

TEST_F(PsTraining, SyncTrainingNamesAKilledWorkerWithinTheDeadline) {
  const std::string args = syntheticTrainArgs("mlp", 16, dir_.str("run"),
                                              "--max-steps 100000 --peer-timeout 3");
  auto cluster = startCluster(dir_, 2, args, [](int) { return ""; });
  ASSERT_TRUE(testing::waitForOutput(cluster.workers[1], dir_.path() / "run" / "workers" / "worker-1" / "metrics.jsonl",
                                     std::chrono::seconds(60)))
      << readFile(dir_.path() / "worker1.log");
  const auto killed = std::chrono::steady_clock::now();
  ::kill(cluster.workers[1], SIGKILL);
  const int chief = testing::waitForExit(cluster.workers[0], std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const std::string log = readFile(dir_.path() / "worker0.log");
  EXPECT_NE(chief, 0) << log;
  EXPECT_NE(chief, -1) << "worker 0 still running 60 s after worker 1 died:\n" << log;
  EXPECT_NE(log.find("worker 1"), std::string::npos) << log;
  EXPECT_LT(seconds, 15) << log;
  // The server ends too, reporting the lost worker.
  EXPECT_EQ(testing::waitForExit(cluster.ps, std::chrono::seconds(30)), 1) << readFile(dir_.path() / "ps.log");
  EXPECT_NE(readFile(dir_.path() / "ps.log").find("worker 1"), std::string::npos);
}

// A dead server is named by its connection dropping, not after
// --peer-timeout (120 s here): within the 10 s.
TEST_F(PsTraining, WorkersNameAKilledServerWithinSeconds) {
  const std::string args = syntheticTrainArgs("mlp", 16, dir_.str("run"), "--max-steps 100000");
  auto cluster = startCluster(dir_, 2, args, [](int) { return ""; });
  ASSERT_TRUE(testing::waitForOutput(cluster.workers[1], dir_.path() / "run" / "workers" / "worker-1" / "metrics.jsonl",
                                     std::chrono::seconds(60)))
      << readFile(dir_.path() / "worker1.log");
  const auto killed = std::chrono::steady_clock::now();
  ::kill(cluster.ps, SIGKILL);
  for (int i = 0; i < 2; ++i) {
    const int code = testing::waitForExit(cluster.workers[static_cast<size_t>(i)], std::chrono::seconds(30));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    const std::string log = readFile(dir_.path() / fmt::format("worker{}.log", i));
    EXPECT_EQ(code, 1) << log;
    EXPECT_LT(seconds, 10) << log;
    EXPECT_NE(log.find("ps 0: the connection to"), std::string::npos) << log;
    EXPECT_NE(log.find("was lost"), std::string::npos) << log;
  }
}

// SIGTERM reaches a worker blocked on a live server that waits for a frozen
// peer: it stops within the stop grace, not after --peer-timeout.
TEST_F(PsTraining, SigtermStopsAWorkerBlockedOnTheServer) {
  const std::string args = syntheticTrainArgs("mlp", 16, dir_.str("run"), "--max-steps 100000 --peer-timeout 60");
  auto cluster = startCluster(dir_, 2, args, [](int) { return ""; });
  ASSERT_TRUE(testing::waitForOutput(cluster.workers[1], dir_.path() / "run" / "workers" / "worker-1" / "metrics.jsonl",
                                     std::chrono::seconds(60)))
      << readFile(dir_.path() / "worker1.log");
  ::kill(cluster.workers[1], SIGSTOP);  // worker 0's next step now waits on ps 0 for it
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto asked = std::chrono::steady_clock::now();
  ::kill(cluster.workers[0], SIGTERM);
  const int code = testing::waitForExit(cluster.workers[0], std::chrono::seconds(30));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  ::kill(cluster.workers[1], SIGKILL);
  ::kill(cluster.ps, SIGKILL);
  testing::waitForExit(cluster.workers[1], std::chrono::seconds(10));
  testing::waitForExit(cluster.ps, std::chrono::seconds(10));
  const std::string log = readFile(dir_.path() / "worker0.log");
  EXPECT_EQ(code, 130) << log;
  EXPECT_LT(seconds, 5) << log;
  EXPECT_NE(log.find("stopped by a signal while waiting for ps 0"), std::string::npos) << log;
}

TEST_F(PsTraining, SigtermUnderLaunchStopsWorkersTogetherAndServersCleanly) {
  const std::string out = dir_.str("run");
  pid_t pid = testing::spawnTandem(
      "launch --ps 1 --workers 2 -- " + syntheticTrainArgs("mlp", 16, out, "--max-steps 1000000"), dir_.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, std::filesystem::path(out) / "metrics.jsonl", std::chrono::seconds(60)))
      << readFile(dir_.path() / "log");
  ::kill(pid, SIGTERM);
  EXPECT_EQ(testing::waitForExit(pid, std::chrono::seconds(60)), 130) << readFile(dir_.path() / "log");
  auto chief = summaryOf(out);
  EXPECT_TRUE(chief["interrupted"].get<bool>());
  EXPECT_EQ(chief["steps"], summaryOf(std::filesystem::path(out) / "workers" / "worker-1")["steps"]);
  EXPECT_TRUE(summaryOf(std::filesystem::path(out) / "ps" / "ps-0")["lost_workers"].empty());
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// --overwrite with servers: the chief clears the run directory but ps/,
// which each server clears itself (with --timeline it writes there from the
// start; the chief clearing it too raced and failed the job).
TEST_F(PsTraining, OverwriteClearsTheServersFilesWithoutRacingThem) {
  const std::filesystem::path out = dir_.path() / "again";
  for (const auto& stale : {out / "stale.txt", out / "ps" / "ps-0" / "stale.json"}) {
    std::filesystem::create_directories(stale.parent_path());
    std::ofstream(stale) << "from an earlier run";
  }
  auto run = runTandem("launch --ps 1 --workers 1 -- " +
                       syntheticTrainArgs("mlp", 32, out.string(), "--max-steps 5 --seed 2 --timeline --overwrite"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_FALSE(std::filesystem::exists(out / "stale.txt"));
  EXPECT_FALSE(std::filesystem::exists(out / "ps" / "ps-0" / "stale.json"));
  EXPECT_TRUE(std::filesystem::exists(out / "ps" / "ps-0" / "summary.json"));
  EXPECT_TRUE(std::filesystem::exists(out / "ps" / "ps-0" / "timeline-ps-0.json"));
}

TEST(BenchPsApply, ReportsEveryKernelAgainstMemcpy) {
  auto run = testing::runTandem("bench ps-apply --mb 1 --seconds 0.05");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* kernel :
       {"memcpy", "sgd-momentum", "sgd-momentum, delay-compensated", "delay-compensated, constant lambda", "adam",
        "sum of 4 gradients", "vs memcpy"}) {
    EXPECT_NE(run.output.find(kernel), std::string::npos) << kernel << "\n" << run.output;
  }
  auto bad = testing::runTandem("bench ps-apply --mb 0");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--mb"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// The servers' optimizer state travels in the chief's checkpoint, so a
// resumed PS run continues the exact trajectory.
void expectPsResumeContinuesExactly(const TempDir& dir, const std::string& optimizer) {
  const std::string launch = "launch --ps 2 --workers 2 -- ";
  const std::string common = optimizer + " --ps-chunk-mb 0.01 --seed 9";
  auto full = testing::runTandem(launch + syntheticTrainArgs("mlp", 16, dir.str("full"), common + " --max-steps 20"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto half = testing::runTandem(launch + syntheticTrainArgs("mlp", 16, dir.str("half"), common + " --max-steps 10"));
  ASSERT_EQ(half.exit_code, 0) << half.output;
  auto resumed = testing::runTandem(launch + syntheticTrainArgs("mlp", 16, dir.str("resumed"),
                                                                common + " --max-steps 20 --resume " +
                                                                    dir.str("half/checkpoint.ckpt")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto a = checkpointParameters(dir.str("full/checkpoint.ckpt"));
  auto b = checkpointParameters(dir.str("resumed/checkpoint.ckpt"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << optimizer << " tensor " << i;
}

TEST(PsResume, AdamContinuesTheExactTrajectory) {
  TempDir dir;
  expectPsResumeContinuesExactly(dir, "--optimizer adam --lr 0.002");
}

TEST(PsResume, RmsPropWithThreeSlotsContinuesTheExactTrajectory) {
  TempDir dir;
  expectPsResumeContinuesExactly(dir, "--optimizer rmsprop --lr 0.001 --momentum 0.5 --rmsprop-centered");
}

TEST(PsResume, SgdMomentumContinuesTheExactTrajectory) {
  TempDir dir;
  expectPsResumeContinuesExactly(dir, "--optimizer sgd --lr 0.02 --momentum 0.9 --nesterov");
}

}  // namespace
}  // namespace tandem
