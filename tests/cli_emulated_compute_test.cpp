// --emulate-compute from the command line: one worker's step takes the
// profile's time, and distributed runs keep every byte on the wire real.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <vector>

#include "support/process.hpp"

namespace tandem {
namespace {

using testing::readFile;
using testing::runTandem;
using testing::TempDir;

const std::string kProfile = std::string(TANDEM_SOURCE_DIR) + "/profiles/resnet110-titanx-b128.json";

std::string emulatedArgs(const std::string& out, const std::string& profile = kProfile, int steps = 12) {
  return "--model resnet110 --dataset synthetic --synthetic-shape 3x32x32 --batch-size 128 --max-steps " +
         std::to_string(steps) + " --log-every 4 --emulate-compute " + profile + " --out " + out;
}

TEST(CliEmulatedCompute, OneWorkersStepTakesTheProfilesTime) {
  TempDir dir;
  auto run = runTandem("train " + emulatedArgs(dir.str("alone")));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto summary = nlohmann::json::parse(readFile(dir.path() / "alone" / "summary.json"));
  const double step = summary["step_breakdown"]["step"].get<double>();
  EXPECT_GE(step, 0.330) << summary.dump(2);
  EXPECT_LT(step, 0.330 * 1.05) << summary.dump(2);  // the profile: 110 + 220 ms
  EXPECT_EQ(summary["emulated_compute"]["backward_ms"], 220.0);
  EXPECT_TRUE(summary["test_accuracy"].is_null()) << "nothing real was evaluated";
}

TEST(CliEmulatedCompute, TwoWorkersReduceTheFixedGradientsIntoEqualReplicas) {
  TempDir dir;
  auto run = runTandem("launch --workers 2 -- " + emulatedArgs(dir.str("two")) + " --verify-replicas-every 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto summary = nlohmann::json::parse(readFile(dir.path() / "two" / "summary.json"));
  EXPECT_EQ(summary["mode"], "allreduce");
  EXPECT_EQ(summary["steps"], 12);
  // Buckets sized from the model (--bucket-mb 0): a 16th of its 1.73M
  // floats each, packed whole parameter by parameter, so about 16.
  const int64_t floats = summary["parameters"].get<int64_t>();
  EXPECT_EQ(summary["strategy"]["bucket_cap_bytes"].get<int64_t>(), (floats + 15) / 16 * 4) << summary.dump(2);
  EXPECT_GE(summary["strategy"]["buckets"].get<int>(), 16) << summary.dump(2);
  EXPECT_LE(summary["strategy"]["buckets"].get<int>(), 24) << summary.dump(2);
}

// --timeline under launch: one merged Chrome trace with both workers, whose
// phase spans nest inside their step spans, with bucket all-reduces and the
// emulated layers' backward spans.
TEST(CliEmulatedCompute, LaunchMergesTheWorkersTimelines) {
  TempDir dir;
  auto run = runTandem("launch --workers 2 -- " + emulatedArgs(dir.str("tl"), kProfile, 3) + " --timeline");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto trace = nlohmann::json::parse(readFile(dir.path() / "tl" / "timeline.json"));
  std::map<int, std::string> processes;
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> steps;  // by pid
  int phases = 0, buckets = 0, layers = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"].get<int>()] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    ASSERT_GE(e["dur"].get<int64_t>(), 0) << e;  // every span is closed
    const std::string name = e["name"];
    if (name.rfind("step ", 0) == 0) steps[e["pid"].get<int>()].push_back({e["ts"], e["ts"].get<int64_t>() + e["dur"].get<int64_t>()});
    if (name.rfind("all-reduce bucket", 0) == 0) ++buckets;
    if (e["tid"] == 2) ++layers;
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{0, "worker 0"}, {1, "worker 1"}}));
  ASSERT_EQ(steps[0].size(), 3u);
  ASSERT_EQ(steps[1].size(), 3u);
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] != 0 || e["name"].get<std::string>().rfind("step ", 0) == 0) continue;
    const int64_t begin = e["ts"], end = begin + e["dur"].get<int64_t>();
    bool inside = false;
    for (const auto& [b, f] : steps[e["pid"].get<int>()]) inside = inside || (b <= begin && end <= f);
    EXPECT_TRUE(inside) << "a phase outside every step: " << e;
    ++phases;
  }
  EXPECT_GE(phases, 2 * 3 * 4);  // input wait, forward+backward, synchronize, update
  EXPECT_GE(buckets, 2 * 3);
  EXPECT_GE(layers, 2 * 3 * 100);  // resnet110's parameters, each step
}

// --timeline with a parameter server: the workers' pushes and pulls, and the
// server's own queue, apply and pull-wait spans in its process, on one clock.
TEST(CliEmulatedCompute, ParameterServerSpansOnBothSidesOfTheWire) {
  TempDir dir;
  auto run = runTandem("launch --ps 1 --workers 2 -- " + emulatedArgs(dir.str("ps"), kProfile, 3) +
                       " --ps-chunk-mb 2 --timeline");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto trace = nlohmann::json::parse(readFile(dir.path() / "ps" / "timeline.json"));
  std::map<int, std::string> processes;
  std::map<std::string, int> spans;  // by the name's first word, and by process
  int64_t first_push = INT64_MAX, first_apply = INT64_MAX, last_apply_end = 0, last_pull_end = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"].get<int>()] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    ASSERT_GE(e["dur"].get<int64_t>(), 0) << e;
    const std::string name = e["name"];
    const std::string word = name.substr(0, name.find(' '));
    ++spans[word + "@" + std::to_string(e["pid"].get<int>())];
    const int64_t begin = e["ts"], end = begin + e["dur"].get<int64_t>();
    if (word == "push") first_push = std::min(first_push, begin);
    if (word == "apply") {
      first_apply = std::min(first_apply, begin);
      last_apply_end = std::max(last_apply_end, end);
    }
    if (word == "pull" && e["pid"] == 0) last_pull_end = std::max(last_pull_end, end);
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{0, "worker 0"}, {1, "worker 1"}, {1000, "ps 0"}}));
  // resnet110's 6.9 MB in 2 MiB chunks: 4 chunks, pushed and pulled each of 3 steps by each worker,
  // and pulled once more at the start: the timeline opens before the worker joins.
  EXPECT_EQ(spans["push@0"], 3 * 4);
  EXPECT_EQ(spans["pull@1"], (3 + 1) * 4);
  EXPECT_EQ(spans["apply@1000"], 3 * 4);       // sync: once per chunk and step
  EXPECT_EQ(spans["queued:@1000"], 2 * 3 * 4);  // every worker's push waited
  EXPECT_GE(spans["pull@1000"], 2 * 3 * 4);     // the initial pulls too
  // One clock: applies follow the first push, and the last pull ends after the last apply.
  EXPECT_LT(first_push, first_apply);
  EXPECT_GE(last_pull_end, last_apply_end);
}

TEST(CliEmulatedCompute, ABadProfileExitsTwoNamingIt) {
  TempDir dir;
  auto run = runTandem("train " + emulatedArgs(dir.str("bad"), dir.str("nope.json")));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("nope.json"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace tandem
