#pragma once
// Reads what a `tandem train` run left behind: metrics and checkpoints.
// Torch-free, so that process tests compile without torch's headers; the
// checkpoint readers are in run_artifacts.cpp (tandem_test_support).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

namespace tandem::testing {

// Every line of a JSON-lines file (metrics.jsonl, restarts.jsonl), parsed;
// none when the file is missing.
inline std::vector<nlohmann::json> jsonLines(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// Mean losses of the run's train lines, in order.
inline std::vector<double> trainLosses(const std::string& run_dir) {
  std::vector<double> losses;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("type") == "train") losses.push_back(j.at("loss").get<double>());
  }
  return losses;
}

// One tensor of a checkpoint, as float32 values in row-major order.
struct StoredTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  bool operator==(const StoredTensor&) const = default;
};
inline void PrintTo(const StoredTensor& t, std::ostream* os) {
  *os << t.name << " " << fmt::format("{}", fmt::join(t.shape, "x"));
}
using StoredParameters = std::vector<StoredTensor>;

// The input the run's model was built for (default: 1x28x28, 10 classes).
struct ModelInput {
  int64_t channels = 1, height = 28, width = 28, classes = 10;
};

// Parameters of the model stored in a checkpoint of a run on `input`.
StoredParameters checkpointParameters(const std::string& path, const ModelInput& input = {});
// Parameters and buffers, by name, of a checkpoint of the built-in `model`.
StoredParameters checkpointTensors(const std::string& path, const std::string& model, const ModelInput& input = {});
// The global step the checkpoint was taken at.
int64_t checkpointGlobalStep(const std::string& path);
// Every parameter's Adam step count in the checkpoint: the updates it had
// when the checkpoint was taken (-1: no state yet).
std::vector<int64_t> checkpointAdamSteps(const std::string& path, const ModelInput& input = {});

// Largest per-tensor relative difference ||a - b|| / ||b||.
double maxRelativeDifference(const StoredParameters& a, const StoredParameters& b);
// Largest element-wise |a - b| over every tensor.
double maxAbsoluteDifference(const StoredParameters& a, const StoredParameters& b);

// Both checkpoints hold bit-identical parameters.
inline void expectSameParameters(const std::string& a, const std::string& b) {
  const auto x = checkpointParameters(a);
  const auto y = checkpointParameters(b);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], y[i]) << a << " vs " << b << ", tensor " << i;
}

// A run's summary.json (a chief's run directory, or a worker's or server's).
inline nlohmann::json summaryOf(const std::filesystem::path& run_dir) {
  std::ifstream in(run_dir / "summary.json");
  return nlohmann::json::parse(in);
}

// `tandem train` arguments for a small run on synthetic 1x28x28 data, which
// keeps tests independent of installed datasets; `extra` picks the optimizer.
inline std::string syntheticTrainArgs(const std::string& model, int64_t batch, const std::string& out,
                                      const std::string& extra = "") {
  return fmt::format(
      "--model {} --mlp-widths 64,32 --dataset synthetic --synthetic-shape 1x28x28 --synthetic-size 4096 "
      "--batch-size {} --threads 1 --log-every 10 --eval-every 0 --eval-batch-size 1000 --progress plain --out {} {}",
      model, batch, out, extra);
}

}  // namespace tandem::testing
