#pragma once
// Reads what a `tandem train` run left behind: metrics and checkpoints.
#include <nlohmann/json.hpp>

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

// Parameters of the model stored in a checkpoint of a 1x28x28, 10-class run.
inline std::vector<torch::Tensor> checkpointParameters(const std::string& path) {
  train::LoadedCheckpoint checkpoint(path);
  auto config = train::trainConfigFromJson(checkpoint.meta().config);
  auto model = models::createModel(config.model, {1, 28, 28, 10}, config.model_options);
  checkpoint.restore(*model, nullptr, false);
  return model->parameters();
}

}  // namespace tandem::testing
