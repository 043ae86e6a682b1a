// Hierarchical aggregation for sync parameter servers (--hierarchical):
// two "hosts" on this machine (127.0.0.1 and 127.0.0.2, both loopback),
// two workers each, a server on each. The lab test (cli_lab_test) measures
// the host links; this one needs no root.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::checkpointParameters;
using testing::maxAbsoluteDifference;
using testing::readFile;
using testing::TempDir;

// Runs the 2 servers and 4 workers by hand; returns the run directory.
std::filesystem::path runTwoHosts(const TempDir& dir, const std::string& name, const std::string& extra) {
  std::vector<int> ports;
  for (int i = 0; i < 6; ++i) ports.push_back(testing::freePort());
  const std::string cluster =
      fmt::format("--worker-hosts 127.0.0.1:{},127.0.0.1:{},127.0.0.2:{},127.0.0.2:{} --ps-hosts 127.0.0.1:{},127.0.0.2:{}",
                  ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]);
  const std::string args = testing::syntheticTrainArgs("mlp", 32, dir.str(name), "--max-steps 30 --seed 9 " + extra) +
                           " " + cluster;
  std::vector<std::pair<pid_t, std::string>> tasks;
  for (int i = 0; i < 2; ++i) {
    const std::string log = dir.str(fmt::format("{}-ps{}.log", name, i));
    tasks.push_back({testing::spawnTandem(fmt::format("train {} --job-name ps --task-index {}", args, i), log), log});
  }
  for (int i = 0; i < 4; ++i) {
    const std::string log = dir.str(fmt::format("{}-w{}.log", name, i));
    tasks.push_back({testing::spawnTandem(fmt::format("train {} --job-name worker --task-index {}", args, i), log), log});
  }
  for (const auto& [pid, log] : tasks) EXPECT_EQ(testing::waitForExit(pid, std::chrono::seconds(180)), 0) << readFile(log);
  return dir.path() / name;
}

int64_t serverPushes(const std::filesystem::path& run) {
  int64_t pushes = 0;
  for (int i = 0; i < 2; ++i) {
    pushes += nlohmann::json::parse(readFile(run / "ps" / fmt::format("ps-{}", i) / "summary.json"))["pushes"].get<int64_t>();
  }
  return pushes;
}

TEST(CliHierarchical, EachHostPushesOnceAndTrainsLikeTheFlatLayout) {
  TempDir dir;
  const auto grouped = runTwoHosts(dir, "auto", "");
  const auto flat = runTwoHosts(dir, "off", "--hierarchical off");
  // Every chunk once per host a step, against once per worker.
  EXPECT_EQ(serverPushes(flat), 4 * 30 * 2);  // 2 chunks (one per server)
  EXPECT_EQ(serverPushes(grouped), 2 * 30 * 2);
  EXPECT_NE(readFile(dir.path() / "auto-w3.log").find("summed with 1 host-mate(s) first"), std::string::npos);
  // The same mean gradient, added in another order.
  const auto a = checkpointParameters((grouped / "checkpoint.ckpt").string());
  const auto b = checkpointParameters((flat / "checkpoint.ckpt").string());
  EXPECT_LT(maxAbsoluteDifference(a, b), 1e-5);
  const auto start = testing::trainLosses(flat.string());
  ASSERT_GE(start.size(), 2u);
  EXPECT_LT(start.back(), start.front());  // it trained
}

}  // namespace
}  // namespace tandem
