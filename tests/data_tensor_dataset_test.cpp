// TensorDataset: the caller's tensors as a dataset (tandem::fit).
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "data/tensor_dataset.hpp"

namespace tandem::data {
namespace {

void expectRefused(torch::Tensor inputs, torch::Tensor targets, const std::string& phrase) {
  try {
    TensorDataset("my data", inputs, targets);
    ADD_FAILURE() << "accepted; expected '" << phrase << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("my data"), std::string::npos) << e.what();
  }
}

TEST(TensorDataset, BatchesAreTheRowsAskedForInTheInputsShape) {
  auto x = torch::arange(6 * 4, torch::kFloat32).reshape({6, 4});
  auto y = torch::tensor({0, 2, 1, 0, 2, 1}, torch::kInt64);
  TensorDataset d("my data", x, y);
  EXPECT_EQ(d.size(), 6);
  EXPECT_EQ(d.numClasses(), 3);
  EXPECT_EQ(d.shape().channels, 4);
  const std::vector<int64_t> rows = {4, 1};
  Batch b = d.getBatch(rows, 0);
  EXPECT_TRUE(torch::equal(b.inputs, x.index_select(0, torch::tensor({4, 1}))));
  EXPECT_TRUE(torch::equal(b.targets, torch::tensor({2, 2}, torch::kInt64)));
  TensorDataset images("images", torch::zeros({2, 3, 8, 5}), torch::zeros({2}, torch::kInt64));
  EXPECT_EQ(images.shape().channels, 3);
  EXPECT_EQ(images.shape().height, 8);
  EXPECT_EQ(images.shape().width, 5);
  const std::vector<int64_t> one = {1};
  EXPECT_EQ(images.getBatch(one, 0).inputs.sizes(), torch::IntArrayRef({1, 3, 8, 5}));
}

TEST(TensorDataset, BadTensorsAreRefusedNamingTheData) {
  const auto y = torch::zeros({4}, torch::kInt64);
  expectRefused(torch::zeros({4}), y, "non-empty [N, ...]");
  expectRefused(torch::zeros({4, 2}, torch::kFloat64), y, "float32");
  expectRefused(torch::zeros({4, 2}), torch::zeros({4}), "int64 [N] tensor of class indices");
  expectRefused(torch::zeros({4, 2}), torch::zeros({3}, torch::kInt64), "4 inputs but 3 targets");
  expectRefused(torch::zeros({4, 2}), torch::tensor({0, 1, -1, 0}, torch::kInt64), "target -1 is negative");
}

}  // namespace
}  // namespace tandem::data
