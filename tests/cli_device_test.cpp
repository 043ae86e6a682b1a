// --device as a user meets it: where it trains, and what it refuses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/gpu_driver.hpp"
#include "support/process.hpp"

namespace tandem {
namespace {
using testing::readFile;
using testing::runTandem;
using testing::TempDir;

std::string tinyRun(const std::string& out, const std::string& device) {
  return "train --model mlp --mlp-widths 16 --dataset synthetic --synthetic-size 64 --batch-size 16 --max-steps 3 "
         "--threads 1 --progress plain --out " + out + " --device " + device;
}

TEST(CliDevice, AutoTrainsOnTheCpuWithoutAGpuAndSaysWhy) {
  if (testing::gpuDriverHere()) GTEST_SKIP() << "a GPU driver is here: --device auto would take the GPU";
  TempDir dir;
  const auto run = runTandem(tinyRun(dir.str("run"), "auto"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto summary = nlohmann::json::parse(readFile(dir.path() / "run" / "summary.json"));
  EXPECT_EQ(summary["device"], "cpu");
  EXPECT_NE(summary["device_reason"].get<std::string>().find("no GPU visible"), std::string::npos) << summary.dump();
  EXPECT_NE(run.output.find("on cpu (--device auto: no GPU visible"), std::string::npos) << run.output;
}

TEST(CliDevice, CudaWithoutAGpuIsBadInputNamingTheFlag) {
  if (testing::gpuDriverHere()) GTEST_SKIP() << "a GPU driver is here";
  TempDir dir;
  const auto run = runTandem(tinyRun(dir.str("run"), "cuda"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--device cuda: no GPU is visible to this process"), std::string::npos) << run.output;
}

TEST(CliDevice, AMisspelledDeviceIsBadInput) {
  TempDir dir;
  const auto run = runTandem(tinyRun(dir.str("run"), "gpu0"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--device gpu0: expected auto, cpu, cuda or cuda:N"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace tandem
