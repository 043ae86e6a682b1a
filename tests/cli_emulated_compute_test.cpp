// --emulate-compute from the command line: one worker's step takes the
// profile's time, and distributed runs keep every byte on the wire real.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/process.hpp"

namespace tandem {
namespace {

using testing::readFile;
using testing::runTandem;
using testing::TempDir;

const std::string kProfile = std::string(TANDEM_SOURCE_DIR) + "/profiles/resnet110-titanx-b128.json";

std::string emulatedArgs(const std::string& out, const std::string& profile = kProfile) {
  return "--model resnet110 --dataset synthetic --synthetic-shape 3x32x32 --batch-size 128 --max-steps 12 "
         "--log-every 4 --emulate-compute " + profile + " --out " + out;
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
}

TEST(CliEmulatedCompute, ABadProfileExitsTwoNamingIt) {
  TempDir dir;
  auto run = runTandem("train " + emulatedArgs(dir.str("bad"), dir.str("nope.json")));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("nope.json"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace tandem
