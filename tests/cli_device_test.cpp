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

// Mixed precision on the CPU (autocast exists there too): the forward in
// bfloat16, the weights float32, and the run still learns.
TEST(CliDevice, Bfloat16MixedPrecisionTrainsAndIsReported) {
  if (!testing::fashionMnistInstalled()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const auto run = runTandem("train --model cnn --dataset fashion-mnist --batch-size 32 --threads 2 --max-steps 60 "
                             "--lr 0.05 --progress plain --device cpu --amp bf16 --out " + dir.str("run"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto summary = nlohmann::json::parse(readFile(dir.path() / "run" / "summary.json"));
  EXPECT_EQ(summary["amp"]["dtype"], "bf16");
  EXPECT_TRUE(summary["amp"]["loss_scale"].is_null());  // bfloat16 keeps float32's range: no scale
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.55) << summary.dump();
}

// The CPU kernels are deterministic already; the flag must not stop a run
// there, and a second run of the same seed gives the same losses.
TEST(CliDevice, DeterministicRunsRepeatExactly) {
  TempDir dir;
  std::vector<nlohmann::json> summaries;
  for (const char* name : {"a", "b"}) {
    const auto run = runTandem(tinyRun(dir.str(name), "cpu") + " --deterministic");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    summaries.push_back(nlohmann::json::parse(readFile(dir.path() / name / "summary.json")));
  }
  EXPECT_TRUE(summaries[0]["deterministic"].get<bool>());
  EXPECT_EQ(summaries[0]["final_loss"], summaries[1]["final_loss"]);
  EXPECT_EQ(summaries[0]["test_loss"], summaries[1]["test_loss"]);
}

TEST(CliDevice, PrecisionFlagsThatCannotApplyAreBadInput) {
  TempDir dir;
  auto expectRefused = [&](const std::string& flags, const std::string& needle) {
    const auto run = runTandem(tinyRun(dir.str("run"), "cpu") + " --overwrite " + flags);
    EXPECT_EQ(run.exit_code, 2) << flags << ": " << run.output;
    EXPECT_NE(run.output.find(needle), std::string::npos) << run.output;
  };
  expectRefused("--amp fp8", "--amp: expected off, bf16 or fp16, got 'fp8'");
  expectRefused("--amp fp16", "--amp fp16 on the CPU");
  const auto launched = runTandem("launch --ps 1 --workers 1 -- " + tinyRun(dir.str("ps"), "cpu").substr(6) +
                                  " --amp fp16");
  EXPECT_EQ(launched.exit_code, 2) << launched.output;
  EXPECT_NE(launched.output.find("--amp fp16: its loss scale skips steps on the worker"), std::string::npos)
      << launched.output;
  const auto nhwc = runTandem("launch --ps 1 --workers 1 -- " + tinyRun(dir.str("ps"), "cpu").substr(6) +
                              " --overwrite --channels-last");
  EXPECT_EQ(nhwc.exit_code, 2) << nhwc.output;
  EXPECT_NE(nhwc.output.find("--channels-last: not with parameter servers yet"), std::string::npos) << nhwc.output;
}

}  // namespace
}  // namespace tandem
