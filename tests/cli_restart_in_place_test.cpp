// Tasks started by hand, without a launcher. With `train --restart-wait`,
// a server killed and started again by hand: the workers start themselves
// again in place, the surviving server starts over, and every task
// continues from the newest checkpoint. Without it, a sync worker started
// again by hand joins the running job live.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

#include <atomic>
#include <thread>

#include "net/frame.hpp"
#include "net/job_security.hpp"
#include "ps/messages.hpp"
#include "ps/protocol.hpp"
#include "support/process.hpp"
#include "support/run_artifacts.hpp"
#include "support/test_security.hpp"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using testing::readFile;
using testing::TempDir;

struct HandJob {
  std::string args;  // every task's, without --job-name and --task-index
  std::vector<pid_t> ps, workers;
};

pid_t startTask(const TempDir& dir, const HandJob& job, const char* role, int index) {
  return testing::spawnTandem(fmt::format("train {} --job-name {} --task-index {}", job.args, role, index),
                              dir.str(fmt::format("{}{}.log", role, index)));
}

// `servers` servers and 2 workers on 127.0.0.1, each started by hand.
HandJob startHandJob(const TempDir& dir, const std::string& out, const std::string& extra, int servers = 2) {
  HandJob job;
  std::vector<std::string> workers, ps;
  for (int i = 0; i < 2; ++i) workers.push_back(fmt::format("127.0.0.1:{}", testing::freePort()));
  for (int i = 0; i < servers; ++i) ps.push_back(fmt::format("127.0.0.1:{}", testing::freePort()));
  job.args = testing::syntheticTrainArgs("mlp", 16, out, extra) +
             fmt::format(" --worker-hosts {} --ps-hosts {}", fmt::join(workers, ","), fmt::join(ps, ","));
  for (int i = 0; i < servers; ++i) job.ps.push_back(startTask(dir, job, "ps", i));
  for (int i = 0; i < 2; ++i) job.workers.push_back(startTask(dir, job, "worker", i));
  return job;
}

std::string logs(const TempDir& dir) {
  std::string all;
  for (const char* task : {"ps0", "ps1", "ps1-again", "worker0", "worker1", "worker1-again"}) {
    const fs::path log = dir.path() / (std::string(task) + ".log");
    if (fs::exists(log)) all += fmt::format("--- {}\n{}", task, readFile(log));
  }
  return all;
}

void awaitFirstCheckpoint(const TempDir& dir, const HandJob& job, const std::string& run) {
  ASSERT_TRUE(testing::waitForOutput(job.workers[0], fs::path(run) / "checkpoints" / "latest", std::chrono::seconds(120)))
      << logs(dir);
}

// Kills `pid` with SIGKILL and starts `args` in its place, by hand.
void killAndStartAgain(const TempDir& dir, pid_t& pid, const std::string& args, const std::string& log) {
  ::kill(pid, SIGKILL);
  EXPECT_EQ(testing::waitForExit(pid, std::chrono::seconds(10)), 128 + SIGKILL);
  pid = testing::spawnTandem("train " + args, dir.str(log));
}

void expectEveryTaskSucceeds(const TempDir& dir, const HandJob& job) {
  for (const auto* pids : {&job.ps, &job.workers}) {
    for (pid_t pid : *pids) EXPECT_EQ(testing::waitForExit(pid, std::chrono::seconds(180)), 0) << logs(dir);
  }
}

// The same job under launch, never interrupted, ends with the same parameters.
void expectAsUninterrupted(const std::string& run, const std::string& clean, int servers, const std::string& extra) {
  auto uninterrupted = testing::runTandem(fmt::format("launch --ps {} --workers 2 -- {}", servers,
                                                      testing::syntheticTrainArgs("mlp", 16, clean, extra)));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  testing::expectSameParameters(run + "/checkpoint.ckpt", clean + "/checkpoint.ckpt");
}

TEST(RestartInPlace, SyncJobComesBackFromAServerRestartedByHandAndEndsWhereAnUninterruptedRunDoes) {
  TempDir dir;
  const std::string run = dir.str("run"), clean = dir.str("clean");
  const std::string extra = "--max-steps 90 --checkpoint-every 20 --seed 3 --debug-step-delay-ms 25 --ps-chunk-mb 0.02";
  HandJob job = startHandJob(dir, run, extra + " --restart-wait 60 --peer-timeout 30");
  ASSERT_NO_FATAL_FAILURE(awaitFirstCheckpoint(dir, job, run));
  // By hand: the same command again (a server takes --resume and ignores it:
  // the chief restores every shard).
  killAndStartAgain(dir, job.ps[1],
                    fmt::format("{} --job-name ps --task-index 1 --resume {}/checkpoints/latest", job.args, run),
                    "ps1-again.log");
  expectEveryTaskSucceeds(dir, job);
  const std::string chief_log = readFile(dir.path() / "worker0.log");
  const std::string worker1_log = readFile(dir.path() / "worker1.log");
  EXPECT_NE(chief_log.find("worker 0: restarting in place (restart 1: "), std::string::npos) << chief_log;
  // The worker that next talks to ps 1 names it. That may be worker 1
  // alone: when the chief already waits at ps 0 for the step's end, ps 0
  // tells it at once that worker 1 left to start again (not after
  // --peer-timeout).
  auto restartLine = [](const std::string& log) {
    const size_t at = log.find("restarting in place (restart 1: ");
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  const std::string chief_why = restartLine(chief_log), worker1_why = restartLine(worker1_log);
  EXPECT_TRUE(chief_why.find("ps 1") != std::string::npos || worker1_why.find("ps 1") != std::string::npos)
      << logs(dir);
  EXPECT_TRUE(chief_why.find("ps 1") != std::string::npos ||
              chief_why.find("worker 1 left to start again in place") != std::string::npos)
      << chief_why;
  EXPECT_NE(worker1_log.find("rejoined the job's next start"), std::string::npos) << logs(dir);

  std::ifstream records(fs::path(run) / "restarts.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(records, line)) << logs(dir);
  const auto record = nlohmann::json::parse(line);
  EXPECT_FALSE(std::getline(records, line)) << "a second restart: " << line;
  const int resumed = record["resume_step"].get<int>();
  EXPECT_TRUE(resumed == 20 || resumed == 40 || resumed == 60) << record;
  // The steps trained after that checkpoint and before the restart: known
  // (not null), and no more than the run had left.
  ASSERT_TRUE(record["lost_updates"].is_number_integer()) << record;
  EXPECT_GE(record["lost_updates"].get<int>(), 0) << record;
  EXPECT_LE(record["lost_updates"].get<int>(), 90 - resumed) << record;
  // The surviving server started over at the checkpoint; the restarted one
  // began there. Each made exactly the updates after it.
  const auto survivor = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  const auto restarted = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-1" / "summary.json"));
  EXPECT_EQ(survivor["started_over"], 1) << survivor;
  EXPECT_EQ(survivor["global_step"], 90) << survivor;
  EXPECT_EQ(survivor["model_updates"].get<int>(), 90 - resumed) << survivor;
  EXPECT_EQ(restarted["started_over"], 0) << restarted;
  EXPECT_EQ(restarted["model_updates"].get<int>(), 90 - resumed) << restarted;
  expectAsUninterrupted(run, clean, 2, extra);
}

// A dead worker started again by hand: the running start still counts it,
// so it waits for the next one, which the others begin once the server has
// given up on the dead worker (--peer-timeout).
TEST(RestartInPlace, SyncJobTakesBackAWorkerStartedAgainByHand) {
  TempDir dir;
  const std::string run = dir.str("run"), clean = dir.str("clean");
  const std::string extra = "--max-steps 90 --checkpoint-every 20 --seed 5 --debug-step-delay-ms 25";
  HandJob job = startHandJob(dir, run, extra + " --restart-wait 60 --peer-timeout 3", 1);
  ASSERT_NO_FATAL_FAILURE(awaitFirstCheckpoint(dir, job, run));
  killAndStartAgain(dir, job.workers[1], job.args + " --job-name worker --task-index 1", "worker1-again.log");
  expectEveryTaskSucceeds(dir, job);
  EXPECT_NE(readFile(dir.path() / "worker1-again.log").find("waiting up to 60s (--restart-wait) for the job's next start"),
            std::string::npos)
      << logs(dir);
  EXPECT_NE(readFile(dir.path() / "worker0.log").find("restarting in place (restart 1: "), std::string::npos)
      << logs(dir);
  expectAsUninterrupted(run, clean, 1, extra);
}

// Without --restart-wait, a dead sync worker started again by hand joins the
// running job at a step boundary: nobody restarts or rolls back, every step
// is still one update, and the replacement records its join.
TEST(RestartInPlace, SyncWorkerStartedAgainByHandJoinsTheRunningJobLive) {
  TempDir dir;
  const std::string run = dir.str("run");
  HandJob job = startHandJob(
      dir, run, "--max-steps 120 --checkpoint-every 20 --seed 5 --debug-step-delay-ms 25 --peer-timeout 60", 1);
  ASSERT_NO_FATAL_FAILURE(awaitFirstCheckpoint(dir, job, run));
  killAndStartAgain(dir, job.workers[1], job.args + " --job-name worker --task-index 1", "worker1-again.log");
  expectEveryTaskSucceeds(dir, job);
  const std::string again = readFile(dir.path() / "worker1-again.log");
  EXPECT_NE(again.find("so this one was started again after it died; it joins the job at a step boundary"),
            std::string::npos)
      << logs(dir);
  EXPECT_NE(again.find("joined a running sync job in place of a lost worker 1"), std::string::npos) << logs(dir);
  EXPECT_EQ(readFile(dir.path() / "worker0.log").find("restarting in place"), std::string::npos) << logs(dir);

  const auto ps0 = nlohmann::json::parse(readFile(fs::path(run) / "ps" / "ps-0" / "summary.json"));
  EXPECT_EQ(ps0["global_step"], 120) << ps0;
  EXPECT_EQ(ps0["model_updates"], 120) << ps0;
  EXPECT_EQ(ps0["rejoined_workers"], 1) << ps0;
  std::ifstream records(fs::path(run) / "restarts.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(records, line)) << logs(dir);
  const auto record = nlohmann::json::parse(line);
  EXPECT_FALSE(std::getline(records, line)) << "a second record: " << line;
  EXPECT_EQ(record["kind"], "worker_rejoined") << record;
  EXPECT_EQ(record["replaced"], "worker 1") << record;
  EXPECT_EQ(record["lost_updates"], 0) << record;
  EXPECT_EQ(record["rolled_back"], false) << record;
  // It joined after the first checkpoint, and before the end.
  EXPECT_GT(record["joined_at_step"].get<int>(), 20) << record;
  EXPECT_LE(record["joined_at_step"].get<int>(), 120) << record;
}

// Stands at a dead server's addresses (TCP and same-host) and answers
// ps-status as a fresh server would; at the first other request (the
// chief's set-up, or a hello) it closes: a replacement that dies before
// the chief sets it up.
class ReplacementThatDiesAtItsSetUp {
 public:
  explicit ReplacementThatDiesAtItsSetUp(int port) : thread_([this, port] { serve(port); }) {}
  ~ReplacementThatDiesAtItsSetUp() {
    stop_ = true;
    thread_.join();
  }
  bool diedAtSetUp() const { return died_; }

 private:
  void serve(int port) {
    zmq::context_t context(1);
    zmq::socket_t tcp(context, zmq::socket_type::router), local(context, zmq::socket_type::router);
    net::configureSocket(tcp);
    net::configureSocket(local);
    auto zap = net::secureServer(context, tcp, "the dying replacement", testing::testSecurity());
    tcp.bind(net::tcpEndpoint("127.0.0.1", port));
    local.bind(net::sameHostEndpoint(port, testing::testSecurity()));
    std::vector<zmq_pollitem_t> items{{tcp.handle(), 0, ZMQ_POLLIN, 0}, {local.handle(), 0, ZMQ_POLLIN, 0}};
    std::vector<zmq::message_t> parts;
    while (!stop_ && !died_) {
      if (!net::pollItems(items, std::chrono::milliseconds(50))) continue;
      for (zmq::socket_t* socket : {&tcp, &local}) {
        while (const size_t total = net::receiveParts(*socket, parts, 3)) {
          const net::Frame frame = net::decodeFrame(std::span(parts).subspan(1), total - 1, net::kMaxPayloadBytes,
                                                    "a worker", ps::kMessages);
          if (frame.header.type != ps::msg::kStatus) {
            died_ = true;  // closes both sockets at once (linger 0)
            break;
          }
          const std::vector<char> status = ps::encode(ps::ServerStatus{});
          net::sendFrame(*socket, {.request_id = frame.header.request_id},
                         net::copyPayload(status.data(), status.size()), &parts[0]);
        }
        if (died_) break;
      }
    }
    tcp.set(zmq::sockopt::linger, 0);
    local.set(zmq::sockopt::linger, 0);
  }

  std::atomic<bool> stop_{false}, died_{false};
  std::thread thread_;
};

// --ps-replicas 2, by hand: ps 0 is killed, and what answers at its address
// next dies when the chief sets it up. Every worker gives it up and goes on
// at the other replica, instead of waiting for it until --peer-timeout; the
// run still ends where an uninterrupted one does.
TEST(RestartInPlace, ASyncReplicaReplacementThatDiesBeforeItsSetUpIsGivenUpAndTheJobGoesOn) {
  TempDir dir;
  const std::string run = dir.str("run"), clean = dir.str("clean");
  const std::string extra = "--max-steps 200 --checkpoint-every 20 --seed 3 --debug-step-delay-ms 25 "
                            "--ps-chunk-mb 0.02 --ps-replicas 2";
  HandJob job = startHandJob(dir, run, extra + " --peer-timeout 60 --heartbeat-timeout 1");
  ASSERT_NO_FATAL_FAILURE(awaitFirstCheckpoint(dir, job, run));
  const std::string ps_hosts = job.args.substr(job.args.find("--ps-hosts ") + 11);
  const int ps0_port = std::stoi(ps_hosts.substr(ps_hosts.find(':') + 1));
  ::kill(job.ps[0], SIGKILL);
  EXPECT_EQ(testing::waitForExit(job.ps[0], std::chrono::seconds(10)), 128 + SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  std::optional<ReplacementThatDiesAtItsSetUp> replacement(std::in_place, ps0_port);
  for (pid_t pid : {job.workers[0], job.workers[1], job.ps[1]}) {
    EXPECT_EQ(testing::waitForExit(pid, std::chrono::seconds(120)), 0) << logs(dir);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_TRUE(replacement->diedAtSetUp()) << "nobody asked the replacement to set up:\n" << logs(dir);
  replacement.reset();
  EXPECT_LT(seconds, 60) << "the job waited out --peer-timeout:\n" << logs(dir);
  for (const char* worker : {"worker0", "worker1"}) {
    EXPECT_NE(readFile(dir.path() / (std::string(worker) + ".log"))
                  .find("ps 0's replacement was lost before it was taken back after step"),
              std::string::npos)
        << logs(dir);
  }
  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["steps"], 200) << chief;
  expectAsUninterrupted(run, clean, 2, extra);
}

// A server that never comes back: every task gives up within its wait,
// naming it, and nothing restarts twice.
TEST(RestartInPlace, AServerThatNeverComesBackEndsTheJobWithinTheWait) {
  TempDir dir;
  const std::string run = dir.str("run");
  HandJob job = startHandJob(
      dir, run, "--max-steps 100000 --checkpoint-every 10 --debug-step-delay-ms 10 --restart-wait 4 --peer-timeout 3");
  ASSERT_NO_FATAL_FAILURE(awaitFirstCheckpoint(dir, job, run));
  ::kill(job.ps[1], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  for (pid_t pid : {job.workers[0], job.workers[1], job.ps[0]}) {
    EXPECT_EQ(testing::waitForExit(pid, std::chrono::seconds(60)), 1) << logs(dir);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(seconds, 30) << logs(dir);
  testing::waitForExit(job.ps[1], std::chrono::seconds(5));
  const std::string chief_log = readFile(dir.path() / "worker0.log");
  EXPECT_NE(chief_log.find("restarting in place (restart 1: "), std::string::npos) << chief_log;
  EXPECT_EQ(chief_log.find("restart 2"), std::string::npos) << chief_log;
  EXPECT_NE(chief_log.find("ps 1"), std::string::npos) << chief_log;
}

}  // namespace
}  // namespace tandem
