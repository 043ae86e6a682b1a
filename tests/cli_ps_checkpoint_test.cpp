// Checkpoints of parameter-server jobs are consistent snapshots: every
// chunk, on every server, is taken at the same global step.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"
#include "train/optimizer_state.hpp"

namespace tandem {
namespace {
namespace fs = std::filesystem;

// Every parameter's Adam step count in `path`: the updates its chunks had
// when the checkpoint was taken.
std::vector<int64_t> adamSteps(const fs::path& path) {
  train::LoadedCheckpoint checkpoint(path);
  auto config = train::trainConfigFromJson(checkpoint.meta().config);
  auto model = models::createModel(config.model, {1, 28, 28, 10}, config.model_options);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  checkpoint.restore(*model, &adam, false);
  std::vector<int64_t> steps;
  for (const auto& p : model->parameters()) {
    const auto it = adam.state().find(train::optimizerStateKey(p));
    steps.push_back(it == adam.state().end() ? -1
                                             : static_cast<torch::optim::AdamParamState&>(*it->second).step());
  }
  return steps;
}

// Async: two servers, three workers pushing all the while. Each periodic
// checkpoint holds the others at a step boundary, so every chunk on both
// servers has had exactly the checkpoint's global step of updates.
TEST(PsCheckpoint, AsyncCheckpointsHoldEveryChunkAtOneGlobalStep) {
  testing::TempDir dir;
  const std::string out = dir.str("run");
  auto run = testing::runTandem(
      "launch --ps 2 --workers 3 -- " +
      testing::syntheticTrainArgs("mlp", 16, out,
                                  "--ps-mode async --optimizer adam --lr 0.002 --max-steps 240 --checkpoint-every 40 "
                                  "--keep-checkpoints 0 --ps-chunk-mb 0.01 --debug-step-delay-ms 4"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(out) / "checkpoints")) {
    if (entry.path().extension() != ".ckpt") continue;
    const int64_t step = train::LoadedCheckpoint(entry.path()).meta().global_step;
    EXPECT_EQ(entry.path().filename().string(), fmt::format("step-{}.ckpt", step));
    const auto steps = adamSteps(entry.path());
    ASSERT_FALSE(steps.empty());
    for (size_t p = 0; p < steps.size(); ++p) {
      EXPECT_EQ(steps[p], step) << entry.path() << ", parameter " << p;
    }
    ++checked;
  }
  EXPECT_GE(checked, 4) << run.output;
  const auto final_steps = adamSteps(fs::path(out) / "checkpoint.ckpt");
  for (int64_t s : final_steps) EXPECT_EQ(s, 240);
}

}  // namespace
}  // namespace tandem
