// `tandem lab`: emulated hosts in network namespaces, measured against the
// planner. Needs root, as the lab does (CI runs as root); skipped without it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "lab/virtual_network.hpp"
#include "support/process.hpp"
#include "support/run_artifacts.hpp"

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
  static const lab::AdminTools tools = lab::findAdminTools(captureEnvironment());
  size_t n = 0;
  for (const auto& name : lab::labNamespaces(tools)) n += name.rfind("tandem-lab-" + std::to_string(pid) + "-", 0) == 0;
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
      "lab --hosts 2 --link-mbps 100 -- " + trainArgs(writeProfile(dir), dir.str("out"), 25) + " --bucket-mb 25",
      dir.str("log"));
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
           {"lab --hosts 2 --link-mbps 0 -- --max-steps 5", "--link-mbps"},
           {"lab --hosts 2 --ps 1 --torchrun-env -- --max-steps 5", "--torchrun-env"}}) {
    auto run = runTandem(args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(phrase), std::string::npos) << args << "\n" << run.output;
  }
}

// Dilated links stretch every wait on them: the tasks' heartbeat timeout
// grows with the dilation unless given (at dilation 16 the default 5 s was
// 0.3 s emulated, and healthy servers were lost behind a retransmission).
TEST(CliLab, DilationStretchesTheHeartbeatTimeoutUnlessGiven) {
  if (!lab::missingLabPrivileges().empty()) GTEST_SKIP() << lab::missingLabPrivileges();
  TempDir dir;
  for (const auto& [flag, want] : std::vector<std::pair<std::string, double>>{{"", 15}, {" --heartbeat-timeout 7", 7}}) {
    const std::string out = dir.str(flag.empty() ? "default" : "given");
    auto run = runTandem("lab --hosts 2 --ps 2 --dilation 3 -- " + trainArgs(writeProfile(dir), out, 5) + flag);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto config = nlohmann::json::parse(testing::readFile(std::filesystem::path(out) / "run.json"));
    EXPECT_EQ(config["distributed"]["heartbeat_timeout_s"].get<double>(), want) << flag;
  }
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// Issue 13: 2 hosts x 2 workers, sync PS with a server on each host. Summed
// per host first, each host link carries half the bytes of the flat layout,
// and the model ends where the flat layout's does.
TEST(CliLab, HierarchicalAggregationHalvesEachHostsLinkBytes) {
  if (!lab::missingLabPrivileges().empty()) GTEST_SKIP() << lab::missingLabPrivileges();
  TempDir dir;
  const std::string profile = writeProfile(dir);
  auto run = [&](const std::string& name, const std::string& extra) {
    auto result = runTandem("lab --hosts 2 --workers-per-host 2 --ps 2 --link-mbps 100 -- " +
                            trainArgs(profile, dir.str(name), 25) + " --seed 3 " + extra);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return nlohmann::json::parse(testing::readFile(dir.path() / name / "lab.json"));
  };
  const auto grouped = run("auto", "");
  const auto flat = run("off", "--hierarchical off");
  EXPECT_EQ(grouped["cluster"]["layout"], "hier-ps-colocated");
  EXPECT_EQ(flat["cluster"]["layout"], "ps-colocated");
  for (size_t h = 0; h < 2; ++h) {
    for (const char* way : {"sent_bytes_per_step", "received_bytes_per_step"}) {
      const double ratio = grouped["links"][h][way].get<double>() / flat["links"][h][way].get<double>();
      EXPECT_NEAR(ratio, 0.5, 0.04) << "host " << h << " " << way << ": " << grouped["links"] << " against "
                                    << flat["links"];
    }
  }
  // The planner counts the hierarchical layout's bytes too.
  EXPECT_NEAR(grouped["ratios"]["link_bytes_over_algorithm"].get<double>(), 1.0, 0.05) << grouped;
  const auto a = testing::checkpointParameters(dir.str("auto/checkpoint.ckpt"), {3, 32, 32, 10});
  const auto b = testing::checkpointParameters(dir.str("off/checkpoint.ckpt"), {3, 32, 32, 10});
  EXPECT_LT(testing::maxAbsoluteDifference(a, b), 1e-5);
}


// Issue 13, hierarchical all-reduce: 2 hosts x 2 workers, resnet110 (6.9
// MB) in one bucket, so Gloo runs a ring. Flat, the ring of 4 crosses each
// host link with 2*3/4 of the model each way; summed on each host first,
// the ring of 2 hosts carries 2*1/2: two thirds of the bytes, as planned.
// Started as torchrun starts workers (only worker 0's address known), the
// workers tell each other their hosts and sum the same way.
TEST(CliLab, HierarchicalAllReduceCarriesTwoThirdsOfTheFlatRingsBytes) {
  if (!lab::missingLabPrivileges().empty()) GTEST_SKIP() << lab::missingLabPrivileges();
  TempDir dir;
  const std::string profile = dir.str("gpu.json");
  std::ofstream(profile) << R"({"model":"resnet110","device":"a test GPU","batch_size":32,"forward_ms":5,)"
                         << R"("backward_ms":10,"source":"cli_lab_test"})";
  auto run = [&](const std::string& name, const std::string& extra, const std::string& lab_flags = "") {
    auto result = runTandem("lab --hosts 2 --workers-per-host 2 --link-mbps 1000 " + lab_flags +
                            " -- --model resnet110 --dataset "
                            "synthetic --synthetic-shape 3x32x32 --emulate-compute " + profile +
                            " --batch-size 32 --max-steps 9 --seed 3 --bucket-mb 25 --out " + dir.str(name) + " " +
                            extra);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return nlohmann::json::parse(testing::readFile(dir.path() / name / "lab.json"));
  };
  const auto grouped = run("auto", "");
  const auto flat = run("off", "--hierarchical off");
  const auto torchrun = run("torchrun", "", "--torchrun-env");
  EXPECT_EQ(grouped["cluster"]["layout"], "hier-allreduce");
  EXPECT_EQ(torchrun["cluster"]["layout"], "hier-allreduce");
  EXPECT_EQ(flat["cluster"]["layout"], "allreduce");
  for (size_t h = 0; h < 2; ++h) {
    for (const char* way : {"sent_bytes_per_step", "received_bytes_per_step"}) {
      const double ratio = grouped["links"][h][way].get<double>() / flat["links"][h][way].get<double>();
      EXPECT_NEAR(ratio, 2.0 / 3, 0.03) << "host " << h << " " << way << ": " << grouped["links"] << " against "
                                        << flat["links"];
      EXPECT_NEAR(torchrun["links"][h][way].get<double>() / grouped["links"][h][way].get<double>(), 1.0, 0.03)
          << torchrun["links"];
    }
  }
  // The planner counts both algorithms' bytes.
  EXPECT_NEAR(grouped["ratios"]["link_bytes_over_algorithm"].get<double>(), 1.0, 0.05) << grouped;
  EXPECT_NEAR(flat["ratios"]["link_bytes_over_algorithm"].get<double>(), 1.0, 0.05) << flat;
  const auto a = testing::checkpointParameters(dir.str("auto/checkpoint.ckpt"), {3, 32, 32, 10});
  const auto b = testing::checkpointParameters(dir.str("off/checkpoint.ckpt"), {3, 32, 32, 10});
  EXPECT_LT(testing::maxAbsoluteDifference(a, b), 1e-5);
  // The same groups, sums and order: the same bits.
  const auto c = testing::checkpointParameters(dir.str("torchrun/checkpoint.ckpt"), {3, 32, 32, 10});
  EXPECT_EQ(testing::maxAbsoluteDifference(a, c), 0.0);
}

// The spans of task `pid` in a merged timeline.
std::vector<nlohmann::json> spansOf(const nlohmann::json& timeline, int pid) {
  std::vector<nlohmann::json> out;
  for (const auto& e : timeline["traceEvents"]) {
    if (e.value("ph", "") == "X" && e["pid"] == pid) out.push_back(e);
  }
  return out;
}

// Issue 13, priority scheduling: one server on host 0, so worker 1's 17
// chunks of 64 KiB queue behind its 100 Mbit/s link. With --priority on
// the first layers' chunk overtakes the queue, and the next forward starts
// on it while later chunks are still arriving; off, it is pulled last and
// the forward waits for everything. The model ends bit-identical.
// The mean of a timeline counter track's `key` over [begin_us, end_us]:
// each event holds its value until the next one.
double trackMean(const nlohmann::json& timeline, const std::string& track, const std::string& key, double begin_us,
                 double end_us) {
  std::vector<std::pair<double, double>> points;
  for (const auto& e : timeline["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == track) points.emplace_back(e["ts"].get<double>(), e["args"][key].get<double>());
  }
  std::sort(points.begin(), points.end());
  double integral = 0;
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const double from = std::max(points[i].first, begin_us), to = std::min(points[i + 1].first, end_us);
    if (to > from) integral += points[i].second * (to - from);
  }
  return integral / (end_us - begin_us);
}

TEST(CliLab, PriorityPullsTheFirstChunkEarlyAndOverlapsTheNextForward) {
  if (!lab::missingLabPrivileges().empty()) GTEST_SKIP() << lab::missingLabPrivileges();
  TempDir dir;
  const std::string profile = writeProfile(dir);
  struct Overlap {
    int steps = 0;           // steady steps looked at
    int first_early = 0;     // chunk 0 pulled before half the step's chunks or more
    int forward_early = 0;   // the next forward began before the step's last pull ended
  };
  auto run = [&](const std::string& name) {
    auto result = runTandem("lab --hosts 2 --ps 1 --link-mbps 100 -- " + trainArgs(profile, dir.str(name), 16) +
                            " --seed 3 --ps-chunk-mb 0.0625 --timeline --priority " + name);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    const auto spans = spansOf(nlohmann::json::parse(testing::readFile(dir.path() / name / "timeline.json")), 1);
    std::map<int64_t, std::map<int64_t, int64_t>> pull_end;  // step -> chunk -> end
    std::vector<int64_t> forwards;
    std::map<int64_t, int64_t> step_begin;  // "step N" spans: the loop's step N - 1
    for (const auto& e : spans) {
      const std::string n = e["name"];
      const int64_t begin = e["ts"], end = begin + e["dur"].get<int64_t>();
      if (n.rfind("pull chunk ", 0) == 0) pull_end[e["args"]["step"]][std::stoll(n.substr(11))] = end;
      if (n == "forward (emulated)") forwards.push_back(begin);
      if (n.rfind("step ", 0) == 0) step_begin[std::stoll(n.substr(5)) - 1] = begin;
    }
    Overlap o;
    for (const auto& [step, chunks] : pull_end) {
      if (step < 4 || !step_begin.count(step + 1) || chunks.size() != 17) continue;  // warm-up, the last, partial
      ++o.steps;
      int later = 0;
      for (const auto& [c, end] : chunks) later += end > chunks.at(0);
      o.first_early += later >= 8;
      int64_t last = 0;
      for (const auto& [c, end] : chunks) last = std::max(last, end);
      const auto next_forward = std::lower_bound(forwards.begin(), forwards.end(), step_begin.at(step + 1));
      o.forward_early += next_forward != forwards.end() && *next_forward < last;
    }
    return o;
  };
  const Overlap on = run("on");
  const Overlap off = run("off");
  // --timeline also carries each host's link rate as a counter track: over
  // worker 0's steady window, its mean is the rate the lab reports.
  const auto timeline = nlohmann::json::parse(testing::readFile(dir.path() / "on" / "timeline.json"));
  const auto report = nlohmann::json::parse(testing::readFile(dir.path() / "on" / "lab.json"));
  const double begin_us = report["measured"]["window_unix_s"][0].get<double>() * 1e6;
  const double end_us = report["measured"]["window_unix_s"][1].get<double>() * 1e6;
  ASSERT_GT(end_us, begin_us);
  for (int h = 0; h < 2; ++h) {
    const auto& link = report["links"][static_cast<size_t>(h)];
    for (const std::string key : {"sent", "received"}) {
      const double reported = link[key + "_mbit_per_s"].get<double>();
      EXPECT_GT(reported, 10.0) << h << key;  // the job loads both directions of both links
      EXPECT_NEAR(trackMean(timeline, fmt::format("host {} link", h), key, begin_us, end_us), reported,
                  0.03 * reported)
          << h << key;
    }
  }
  ASSERT_GE(on.steps, 8);
  ASSERT_GE(off.steps, 8);
  EXPECT_GE(on.first_early, on.steps - 1) << on.steps;
  EXPECT_GE(on.forward_early, on.steps - 1) << on.steps;
  EXPECT_EQ(off.first_early, 0);
  EXPECT_EQ(off.forward_early, 0);
  const auto a = testing::checkpointParameters(dir.str("on/checkpoint.ckpt"), {3, 32, 32, 10});
  const auto b = testing::checkpointParameters(dir.str("off/checkpoint.ckpt"), {3, 32, 32, 10});
  EXPECT_EQ(testing::maxAbsoluteDifference(a, b), 0.0);
}


// A real built-in model (resnet20, real compute) whose pulls crawl over a
// 20 Mbit/s link: with --priority on its forward enters each block only
// once that block's chunks are in. A stage read before its values arrived
// would change the trajectory; the parameters must equal --priority off's.
TEST(CliLab, PriorityGatesABuiltInModelsStagesExactly) {
  if (!lab::missingLabPrivileges().empty()) GTEST_SKIP() << lab::missingLabPrivileges();
  TempDir dir;
  auto run = [&](const std::string& name) {
    auto result = runTandem("lab --hosts 2 --ps 1 --link-mbps 20 -- --model resnet20 --dataset synthetic "
                            "--synthetic-shape 3x32x32 --batch-size 16 --max-steps 8 --ps-chunk-mb 0.0625 --seed 3 "
                            "--timeline --out " + dir.str(name) + " --priority " + name);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    int waited = 0;  // steps whose forward waited for parameters
    for (const auto& e : spansOf(nlohmann::json::parse(testing::readFile(dir.path() / name / "timeline.json")), 1)) {
      if (e["name"] == "forward+backward") waited += e["args"]["awaited_parameters_ms"].get<double>() > 1.0;
    }
    return waited;
  };
  EXPECT_GE(run("on"), 5);  // 7 steps after the first
  EXPECT_EQ(run("off"), 0);
  const auto a = testing::checkpointParameters(dir.str("on/checkpoint.ckpt"), {3, 32, 32, 10});
  const auto b = testing::checkpointParameters(dir.str("off/checkpoint.ckpt"), {3, 32, 32, 10});
  EXPECT_EQ(testing::maxAbsoluteDifference(a, b), 0.0);
}

}  // namespace
}  // namespace tandem
