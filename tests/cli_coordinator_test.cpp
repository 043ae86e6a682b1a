// `tandem coordinator`: a job's store in a process of its own. Workers
// started by hand, as mpirun or srun would start them, name it with
// --external-coordinator; a live job then goes on through worker 0's death,
// which would end it were worker 0 serving the store.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <regex>
#include <thread>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using testing::readFile;
using testing::TempDir;

// The address the coordinator prints once it serves, or "" when it has
// not within the timeout.
std::string servedAddress(const std::string& log) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  const std::regex serving("serving the job's store at (127\\.0\\.0\\.1:[0-9]+)");
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch match;
    const std::string text = readFile(log);
    if (std::regex_search(text, match, serving)) return match[1];
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "";
}

TEST(Coordinator, AJobStartedWithoutLaunchOutlivesWorkerZeroThroughItsOwnStore) {
  TempDir dir;
  const std::string run = dir.str("run");
  const pid_t coordinator = testing::spawnTandem("coordinator --port 0", dir.str("coordinator.log"));
  const std::string address = servedAddress(dir.str("coordinator.log"));
  ASSERT_FALSE(address.empty()) << readFile(dir.path() / "coordinator.log");

  const std::string hosts = fmt::format("127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}", testing::freePort(),
                                        testing::freePort(), testing::freePort());
  const std::string args =
      testing::syntheticTrainArgs("mlp", 16, run, "--max-steps 160 --min-workers 2 --debug-step-delay-ms 15");
  std::vector<pid_t> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(testing::spawnTandem(
        fmt::format("train {} --worker-hosts {} --job-name worker --task-index {} --coordinator {} "
                    "--external-coordinator",
                    args, hosts, i, address),
        dir.str(fmt::format("worker-{}.log", i))));
  }
  auto logs = [&] {
    std::string all;
    for (int i = 0; i < 3; ++i) all += readFile(dir.path() / fmt::format("worker-{}.log", i));
    return all + readFile(dir.path() / "coordinator.log");
  };
  ASSERT_TRUE(testing::waitForOutput(workers[2], fs::path(run) / "workers" / "worker-2" / "metrics.jsonl",
                                     std::chrono::seconds(120)))
      << logs();
  ::kill(workers[0], SIGKILL);
  EXPECT_EQ(testing::waitForExit(workers[0], std::chrono::seconds(30)), 128 + SIGKILL);
  EXPECT_EQ(testing::waitForExit(workers[1], std::chrono::seconds(120)), 0) << logs();
  EXPECT_EQ(testing::waitForExit(workers[2], std::chrono::seconds(120)), 0) << logs();

  const auto chief = nlohmann::json::parse(readFile(fs::path(run) / "summary.json"));
  EXPECT_EQ(chief["steps"], 160) << chief;
  EXPECT_EQ(chief["rank"], 0) << chief;
  EXPECT_EQ(chief["strategy"]["membership"]["workers"], nlohmann::json({1, 2})) << chief;
  const auto changes = testing::jsonLines(fs::path(run) / "restarts.jsonl");
  ASSERT_EQ(changes.size(), 1u) << logs();
  EXPECT_EQ(changes[0]["departed"][0]["worker"], 0) << changes[0];
  EXPECT_EQ(changes[0]["lost_updates"], 0) << changes[0];
  EXPECT_EQ(changes[0]["rolled_back"], false) << changes[0];

  ::kill(coordinator, SIGTERM);
  EXPECT_EQ(testing::waitForExit(coordinator, std::chrono::seconds(30)), 0);
  EXPECT_NE(readFile(dir.path() / "coordinator.log").find("coordinator: stopped by signal 15"), std::string::npos)
      << readFile(dir.path() / "coordinator.log");
}

TEST(Coordinator, AnAddressItCannotServeIsBadInput) {
  const auto port = testing::runTandem("coordinator --port 70000");
  EXPECT_EQ(port.exit_code, 2) << port.output;
  EXPECT_NE(port.output.find("--port"), std::string::npos) << port.output;
  const auto host = testing::runTandem("coordinator --host 192.0.2.1 --port 0");
  EXPECT_EQ(host.exit_code, 2) << host.output;
  EXPECT_NE(host.output.find("192.0.2.1"), std::string::npos) << host.output;
}

}  // namespace
}  // namespace tandem
