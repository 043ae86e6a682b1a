// `tandem lab`: emulated hosts in network namespaces, measured against the
// planner. Needs root, as the lab does (CI runs as root); skipped without it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lab/virtual_network.hpp"
#include "support/process.hpp"

namespace tandem {
namespace {

using testing::runCommand;
using testing::runTandem;
using testing::TempDir;

// A GPU that takes 10 + 20 ms a step at batch 64: over a 100 Mbit/s link,
// resnet20's 1.08 MB all-reduce (86 ms a direction) dominates.
std::string writeProfile(const TempDir& dir) {
  const std::string path = dir.str("gpu.json");
  std::ofstream(path) << R"({"model":"resnet20","device":"a test GPU","batch_size":64,"forward_ms":10,)"
                      << R"("backward_ms":20,"source":"cli_lab_test"})";
  return path;
}

// The namespaces of the lab run by `pid` (tests may run side by side).
size_t namespacesOf(pid_t pid) {
  size_t n = 0;
  for (const auto& name : lab::labNamespaces()) n += name.rfind("tandem-lab-" + std::to_string(pid) + "-", 0) == 0;
  return n;
}

std::string trainArgs(const std::string& profile, const std::string& out, int steps) {
  return "--model resnet20 --dataset synthetic --synthetic-shape 3x32x32 --emulate-compute " + profile +
         " --batch-size 64 --max-steps " + std::to_string(steps) + " --out " + out;
}

TEST(CliLab, TwoHostsOnAHundredMegabitLinkMatchThePlannerAndLeaveNoNamespace) {
  if (!lab::missingLabPrivileges().empty()) GTEST_SKIP() << lab::missingLabPrivileges();
  TempDir dir;
  const pid_t pid = testing::spawnTandem(
      "lab --hosts 2 --link-mbps 100 -- " + trainArgs(writeProfile(dir), dir.str("out"), 25), dir.str("log"));
  ASSERT_EQ(testing::waitForExit(pid, std::chrono::seconds(300)), 0) << testing::readFile(dir.path() / "log");
  const auto report = nlohmann::json::parse(testing::readFile(dir.path() / "out" / "lab.json"));
  const auto& ratios = report["ratios"];
  // The step within 15% of Tandem's predicted path (one 25 MB bucket: the
  // exchange follows backward): 10 + 20 + 86 ms.
  EXPECT_NEAR(report["predicted"]["step_ms"].get<double>(), 10 + 20 + 4 * 269722 * 8 / 1e5, 0.1) << report;
  EXPECT_NEAR(ratios["measured_over_predicted_step"].get<double>(), 1.0, 0.15) << report;
  // Each host's link carries the ring's 2(n-1)/n of the model each way, within 5%.
  EXPECT_NEAR(ratios["link_bytes_over_algorithm"].get<double>(), 1.0, 0.05) << report;
  for (const auto& link : report["links"]) {
    EXPECT_NEAR(link["sent_bytes_per_step"].get<double>() / (4 * 269722.0), 1.0, 0.05) << link;
    EXPECT_NEAR(link["received_bytes_per_step"].get<double>() / (4 * 269722.0), 1.0, 0.05) << link;
  }
  EXPECT_EQ(report["tasks"].size(), 2u);
  EXPECT_EQ(namespacesOf(pid), 0u);
  const std::string log = testing::readFile(dir.path() / "log");
  EXPECT_NE(log.find("busiest worker link"), std::string::npos) << log;
}

TEST(CliLab, AStopRemovesTheLab) {
  if (!lab::missingLabPrivileges().empty()) GTEST_SKIP() << lab::missingLabPrivileges();
  TempDir dir;
  const pid_t pid = testing::spawnTandem(
      "lab --hosts 2 --link-mbps 100 -- " + trainArgs(writeProfile(dir), dir.str("out"), 100000), dir.str("log"));
  ASSERT_TRUE(testing::waitForOutput(pid, dir.path() / "out" / "metrics.jsonl", std::chrono::seconds(60)))
      << testing::readFile(dir.path() / "log");
  EXPECT_EQ(namespacesOf(pid), 2u);
  ::kill(pid, SIGTERM);
  const int code = testing::waitForExit(pid, std::chrono::seconds(30));
  EXPECT_EQ(code, 130) << testing::readFile(dir.path() / "log");
  EXPECT_EQ(namespacesOf(pid), 0u);
}

TEST(CliLab, RefusesWithoutPrivilegesAndNamesThem) {
  // The same binary with every capability dropped (root included).
  auto run = runCommand(std::string("setpriv --bounding-set=-all --inh-caps=-all ") + TANDEM_BINARY +
                        " lab --hosts 2 -- --max-steps 5");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("CAP_NET_ADMIN"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("CAP_SYS_ADMIN"), std::string::npos) << run.output;
}

TEST(CliLab, BadLayoutsExitTwoNamingTheFlag) {
  for (const auto& [args, phrase] : std::vector<std::pair<std::string, std::string>>{
           {"lab --hosts 2 --ps 3 -- --max-steps 5", "--ps-placement dedicated"},
           {"lab --hosts 2 --dilation 4 -- --max-steps 5", "--emulate-compute"},
           {"lab --hosts 2 -- --max-steps 5 --task-index 1", "--task-index"},
           {"lab --hosts 2 --link-mbps 0 -- --max-steps 5", "--link-mbps"}}) {
    auto run = runTandem(args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(phrase), std::string::npos) << args << "\n" << run.output;
  }
}

}  // namespace
}  // namespace tandem
