// tandem::fit in this process: the optimizer it runs is the one `tandem
// train` runs for the same names and flags (train::applyOptimizerDefaults),
// as the checkpoint it writes records it.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "optim/kernels.hpp"
#include "tandem/trainer.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"
#include "train/run_directory.hpp"

namespace tandem {
namespace {

constexpr const char* kOptimizers[] = {"sgd", "adam", "adamw", "rmsprop"};

// The optimizer settings fit's checkpoint after one step records.
nlohmann::json fitOptimizer(const std::string& optimizer, std::optional<double> momentum,
                            std::optional<double> weight_decay) {
  torch::manual_seed(0);
  const auto dir = std::filesystem::temp_directory_path() / ("tandem_api_fit_" + optimizer);
  std::filesystem::remove_all(dir);
  auto linear = std::make_shared<torch::nn::LinearImpl>(4, 3);
  const TensorData data{torch::randn({16, 4}), torch::randint(0, 3, {16}, torch::kLong)};
  TrainerOptions options;
  options.batch_size = 8;
  options.max_steps = 1;
  options.checkpoint_every_steps = 1;
  options.optimizer = optimizer;
  options.momentum = momentum;
  options.weight_decay = weight_decay;
  options.out_dir = dir.string();
  fit(
      linear, [linear](const torch::Tensor& x) { return linear->forward(x); }, data, data,
      [](const torch::Tensor& out, const torch::Tensor& y) { return torch::nn::functional::cross_entropy(out, y); },
      options);
  const auto checkpoint = train::latestCheckpoint(dir);
  EXPECT_TRUE(checkpoint.has_value()) << "fit wrote no checkpoint under " << dir;
  nlohmann::json stored = checkpoint ? train::LoadedCheckpoint(*checkpoint).meta().config.at("optimizer")
                                     : nlohmann::json::object();
  std::filesystem::remove_all(dir);
  return stored;
}

TEST(OptimizerDefaults, EachOptimizerHasTorchOptimsSharedDefaultsAndTandemsSgdMomentum) {
  // momentum, weight decay: as `tandem train --help` documents them.
  const std::map<std::string, std::pair<double, double>> expected = {
      {"sgd", {0.9, 0}}, {"adam", {0, 0}}, {"adamw", {0, 0.01}}, {"rmsprop", {0, 0}}};
  for (const char* name : kOptimizers) {
    train::OptimizerConfig c;
    c.name = name;
    train::applyOptimizerDefaults(c, std::nullopt, std::nullopt);
    EXPECT_EQ(c.momentum, expected.at(name).first) << name;
    EXPECT_EQ(c.weight_decay, expected.at(name).second) << name;
    train::applyOptimizerDefaults(c, 0.25, 0.125);
    EXPECT_EQ(c.momentum, 0.25) << name;
    EXPECT_EQ(c.weight_decay, 0.125) << name;
  }
}

TEST(Fit, RunsEachOptimizerWithTheDefaultsTandemTrainGivesIt) {
  for (const char* name : kOptimizers) {
    const nlohmann::json stored = fitOptimizer(name, std::nullopt, std::nullopt);
    const optim::OptimizerSettings defaults = optim::optimizerDefaults(name);
    EXPECT_EQ(stored.value("name", ""), name);
    EXPECT_EQ(stored.value("momentum", -1.0), defaults.momentum) << name;
    EXPECT_EQ(stored.value("weight_decay", -1.0), defaults.weight_decay) << name;
  }
}

TEST(Fit, GivenMomentumAndWeightDecayOverrideTheOptimizersDefaults) {
  const nlohmann::json stored = fitOptimizer("rmsprop", 0.5, 0.001);
  EXPECT_EQ(stored.value("momentum", -1.0), 0.5);
  EXPECT_EQ(stored.value("weight_decay", -1.0), 0.001);
}

}  // namespace
}  // namespace tandem
