#include <gtest/gtest.h>

#include <fstream>

#include "core/error.hpp"
#include "support/process.hpp"
#include "train/checkpoint.hpp"
#include "train/optimizer.hpp"

namespace tandem::train {
namespace {
using testing::TempDir;

class TinyModel : public models::Model {
 public:
  explicit TinyModel(int64_t hidden) {
    fc1_ = register_module("fc1", torch::nn::Linear(4, hidden));
    fc2_ = register_module("fc2", torch::nn::Linear(hidden, 3));
  }
  torch::Tensor forward(torch::Tensor x) override { return fc2_(torch::relu(fc1_(x))); }

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// A few SGD-momentum steps so that the optimizer has state worth saving.
void trainSome(TinyModel& model, torch::optim::Optimizer& optimizer, int steps) {
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    auto x = torch::randn({8, 4});
    auto y = torch::randint(0, 3, {8});
    torch::nn::functional::cross_entropy(model.forward(x), y).backward();
    optimizer.step();
  }
}

CheckpointMeta metaFor(const TinyModel& model, int64_t step) {
  return {nlohmann::json{{"model", "tiny"}}, step, 0, modelFingerprint(model)};
}

void expectSameParameters(const torch::nn::Module& a, const torch::nn::Module& b) {
  auto pa = a.parameters();
  auto pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
}

TEST(Checkpoint, RoundTripRestoresModelOptimizerAndRng) {
  TempDir dir;
  torch::manual_seed(1);
  TinyModel model(5);
  OptimizerConfig oc;
  oc.momentum = 0.9;
  auto optimizer = makeOptimizer(oc, model.parameters());
  trainSome(model, *optimizer, 3);
  auto path = dir.path() / "a.ckpt";
  saveCheckpoint(path, metaFor(model, 3), model, optimizer.get());
  // Continue the original for 2 steps.
  trainSome(model, *optimizer, 2);

  torch::manual_seed(99);  // different init and RNG: all must come from the checkpoint
  TinyModel restored(5);
  auto restored_optimizer = makeOptimizer(oc, restored.parameters());
  LoadedCheckpoint loaded(path);
  EXPECT_EQ(loaded.meta().global_step, 3);
  EXPECT_EQ(loaded.meta().config.at("model"), "tiny");
  loaded.restore(restored, restored_optimizer.get(), /*restore_rng=*/true);
  trainSome(restored, *restored_optimizer, 2);
  expectSameParameters(model, restored);
}

TEST(Checkpoint, FlippedByteIsRefusedAsCorrupt) {
  TempDir dir;
  TinyModel model(5);
  auto path = dir.path() / "c.ckpt";
  saveCheckpoint(path, metaFor(model, 1), model, nullptr);
  std::string bytes = testing::readFile(path);
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  try {
    LoadedCheckpoint loaded(path);
    FAIL() << "corrupt checkpoint accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("c.ckpt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, TruncatedMissingAndForeignFilesAreRefused) {
  TempDir dir;
  TinyModel model(5);
  auto path = dir.path() / "t.ckpt";
  saveCheckpoint(path, metaFor(model, 1), model, nullptr);
  std::string bytes = testing::readFile(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 10);
  EXPECT_THROW(LoadedCheckpoint{path}, InputError);
  EXPECT_THROW(LoadedCheckpoint{dir.path() / "missing.ckpt"}, InputError);
  std::ofstream(dir.path() / "foreign.ckpt") << "PK\x03\x04 not ours";
  try {
    LoadedCheckpoint loaded(dir.path() / "foreign.ckpt");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not a Tandem checkpoint"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, MismatchedModelIsRefusedNamingTheTensor) {
  TempDir dir;
  TinyModel saved(5);
  auto path = dir.path() / "m.ckpt";
  saveCheckpoint(path, metaFor(saved, 1), saved, nullptr);
  TinyModel other(6);
  LoadedCheckpoint loaded(path);
  try {
    loaded.restore(other, nullptr, false);
    FAIL() << "mismatched model accepted";
  } catch (const InputError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("fc1.weight:5x4x"), std::string::npos) << what;
    EXPECT_NE(what.find("fc1.weight:6x4x"), std::string::npos) << what;
  }
}

TEST(Checkpoint, SaveReplacesAtomically) {
  TempDir dir;
  TinyModel model(5);
  auto path = dir.path() / "r.ckpt";
  saveCheckpoint(path, metaFor(model, 1), model, nullptr);
  saveCheckpoint(path, metaFor(model, 2), model, nullptr);
  EXPECT_EQ(LoadedCheckpoint(path).meta().global_step, 2);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace tandem::train
