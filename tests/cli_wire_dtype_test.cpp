// --wire-dtype fp16|bf16 end to end: real launch, workers and servers.
// Half the bytes travel, training stays near float32, and the parameter
// servers' float32 values are what the checkpoint keeps.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/wire_dtype.hpp"
#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::checkpointParameters;
using testing::maxAbsoluteDifference;
using testing::readFile;
using testing::runTandem;
using testing::syntheticTrainArgs;
using testing::TempDir;

constexpr const char* kArgs = "--max-steps 30 --seed 9 --lr 0.05";

nlohmann::json jsonAt(const std::filesystem::path& path) { return nlohmann::json::parse(readFile(path)); }

// The bytes every all-reduce of worker 0 carried, from its timeline.
int64_t allreduceBytes(const std::filesystem::path& run) {
  int64_t bytes = 0;
  const auto trace = jsonAt(run / "timeline.json");  // kept: a range-for would not extend its life
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"] == 0 && e["name"].get<std::string>().rfind("all-reduce bucket", 0) == 0) {
      bytes += e["args"]["bytes"].get<int64_t>();
    }
  }
  return bytes;
}

int64_t countRoundedTo16Bits(const testing::StoredParameters& params, WireDtype dtype) {
  int64_t same = 0, total = 0;
  for (const auto& p : params) {
    const float* v = p.values.data();
    for (size_t i = 0; i < p.values.size(); ++i, ++total) {
      uint16_t bits = 0;
      encodeWire(dtype, v + i, &bits, 1);
      float back = 0;
      decodeWire(dtype, &bits, &back, 1);
      same += back == v[i];
    }
  }
  return total - same;
}

TEST(CliWireDtype, AllreduceSendsHalfTheGradientBytesAndStaysNearFloat32) {
  TempDir dir;
  for (const std::string wire : {"fp32", "fp16", "bf16"}) {
    auto run = runTandem("launch --workers 2 -- " +
                         syntheticTrainArgs("mlp", 32, dir.str(wire), std::string(kArgs) + " --timeline --wire-dtype " +
                                                                          wire + (wire == "bf16" ? " --error-feedback" : "")));
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  // 30 all-reduces of the gradients, plus each step's float32 tail (the
  // two workers' compute times, the loss and the stop flag).
  const int64_t tail = 30 * 4 * 4;
  const int64_t full = allreduceBytes(dir.path() / "fp32");
  EXPECT_EQ(allreduceBytes(dir.path() / "fp16"), (full - tail) / 2 + tail);
  EXPECT_EQ(allreduceBytes(dir.path() / "bf16"), (full - tail) / 2 + tail);

  const auto exact = checkpointParameters(dir.str("fp32/checkpoint.ckpt"));
  const double fp16 = maxAbsoluteDifference(exact, checkpointParameters(dir.str("fp16/checkpoint.ckpt")));
  const double bf16 = maxAbsoluteDifference(exact, checkpointParameters(dir.str("bf16/checkpoint.ckpt")));
  EXPECT_GT(fp16, 0.0) << "fp16 rounding changed nothing";
  EXPECT_LT(fp16, 2e-3);
  EXPECT_GT(bf16, fp16) << "bf16 keeps fewer bits than fp16";
  EXPECT_LT(bf16, 2e-2);
}

TEST(CliWireDtype, ParameterServersTakeFewerBytesAndCheckpointTheirFloat32Values) {
  TempDir dir;
  for (const std::string wire : {"fp32", "fp16", "int8"}) {
    const std::string flags = wire == "int8" ? " --push-bits 8" : " --wire-dtype " + wire;
    auto run = runTandem("launch --ps 1 --workers 2 -- " +
                         syntheticTrainArgs("mlp", 32, dir.str(wire), std::string(kArgs) + flags));
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  const auto server32 = jsonAt(dir.path() / "fp32" / "ps" / "ps-0" / "summary.json");
  const auto server16 = jsonAt(dir.path() / "fp16" / "ps" / "ps-0" / "summary.json");
  // Pushes carry the gradients; hellos and clock reports are the same size
  // in both runs, so the gradient bytes halve exactly when all of it does.
  EXPECT_EQ(server16["pushes"], server32["pushes"]);
  const int64_t in32 = server32["bytes_in"], in16 = server16["bytes_in"];
  EXPECT_NEAR(static_cast<double>(in16) / static_cast<double>(in32), 0.5, 0.01) << in16 << " of " << in32;

  // The workers computed with rounded values; the checkpoint holds the
  // servers' own, most of which no 16-bit value equals. Rounding the weights
  // each step moves the run further from float32's than rounding gradients.
  const auto params = checkpointParameters(dir.str("fp16/checkpoint.ckpt"));
  int64_t total = 0;
  for (const auto& p : params) total += static_cast<int64_t>(p.values.size());
  EXPECT_GT(countRoundedTo16Bits(params, WireDtype::kFloat16), total / 2);
  const double apart = maxAbsoluteDifference(checkpointParameters(dir.str("fp32/checkpoint.ckpt")), params);
  EXPECT_GT(apart, 0.0);
  EXPECT_LT(apart, 1e-2);
  const auto losses32 = testing::trainLosses(dir.str("fp32")), losses16 = testing::trainLosses(dir.str("fp16"));
  ASSERT_FALSE(losses32.empty());
  EXPECT_NEAR(losses16.back(), losses32.back(), 0.02 * losses32.back());

  // --push-bits 8: a byte a pushed value and a float32 scale per 128, so
  // about a quarter of the push bytes, while pulls stay float32. Error
  // feedback carries each push's loss into the next, and the run stays near.
  const auto server8 = jsonAt(dir.path() / "int8" / "ps" / "ps-0" / "summary.json");
  EXPECT_EQ(server8["pushes"], server32["pushes"]);
  const int64_t in8 = server8["bytes_in"];
  EXPECT_NEAR(static_cast<double>(in8) / static_cast<double>(in32), (1 + 4.0 / 128) / 4, 0.01) << in8 << " of " << in32;
  EXPECT_EQ(server8["bytes_out"], server32["bytes_out"]);
  const auto losses8 = testing::trainLosses(dir.str("int8"));
  EXPECT_NEAR(losses8.back(), losses32.back(), 0.01 * losses32.back());
}

TEST(CliWireDtype, BadWireFlagsExitTwoNamingTheFlag) {
  TempDir dir;
  auto bad = runTandem("train " + syntheticTrainArgs("mlp", 32, dir.str("a"), "--max-steps 1 --wire-dtype int8"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--wire-dtype: expected fp32, fp16 or bf16, got 'int8'"), std::string::npos) << bad.output;
  auto lone = runTandem("train " + syntheticTrainArgs("mlp", 32, dir.str("b"), "--max-steps 1 --error-feedback"));
  EXPECT_EQ(lone.exit_code, 2) << lone.output;
  EXPECT_NE(lone.output.find("--error-feedback: needs --wire-dtype"), std::string::npos) << lone.output;
}

}  // namespace
}  // namespace tandem
