#pragma once
// Reads what a `tandem train` run left behind: metrics and checkpoints.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "models/registry.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"

namespace tandem::testing {

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

// Parameters of the model stored in a checkpoint of a run on `input`
// (default: 1x28x28, 10 classes).
inline std::vector<torch::Tensor> checkpointParameters(const std::string& path,
                                                       const models::InputSpec& input = {1, 28, 28, 10}) {
  train::LoadedCheckpoint checkpoint(path);
  auto config = train::trainConfigFromJson(checkpoint.meta().config);
  auto model = models::createModel(config.model, input, config.model_options);
  checkpoint.restore(*model, nullptr, false);
  return model->parameters();
}

// Largest per-tensor relative difference ||a - b|| / ||b||.
inline double maxRelativeDifference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    double norm = b[i].norm().item<double>();
    double diff = (a[i] - b[i]).norm().item<double>();
    worst = std::max(worst, norm > 0 ? diff / norm : diff);
  }
  return worst;
}

// Both checkpoints hold bit-identical parameters.
inline void expectSameParameters(const std::string& a, const std::string& b) {
  auto x = checkpointParameters(a);
  auto y = checkpointParameters(b);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(torch::equal(x[i], y[i])) << a << " vs " << b << ", tensor " << i;
}

// Largest element-wise |a - b| over every tensor.
inline double maxAbsoluteDifference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
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
