// The synthetic dataset: deterministic, lazy, validated, and learnable.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "data/dataset.hpp"

namespace tandem::data {
namespace {

DatasetOptions synthetic(SampleShape shape, int64_t classes, int64_t train, int64_t test,
                         uint64_t seed) {
  DatasetOptions o;
  o.name = "synthetic";
  o.synthetic_shape = shape;
  o.synthetic_classes = classes;
  o.synthetic_train_size = train;
  o.synthetic_test_size = test;
  o.synthetic_seed = seed;
  return o;
}

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(DataSynthetic, ReportsShapeAndIsDeterministic) {
  auto a = openDataset(synthetic({2, 5, 7}, 4, 100, 30, 11));
  auto b = openDataset(synthetic({2, 5, 7}, 4, 100, 30, 11));
  EXPECT_EQ(a.train->size(), 100);
  EXPECT_EQ(a.test->size(), 30);
  EXPECT_EQ(a.train->numClasses(), 4);
  EXPECT_EQ(a.train->shape().channels, 2);
  EXPECT_EQ(a.train->shape().height, 5);
  EXPECT_EQ(a.train->shape().width, 7);
  std::vector<int64_t> idx{99, 0, 42};
  auto x = a.train->getBatch(idx, 0);
  auto y = b.train->getBatch(idx, 0);
  ASSERT_EQ(x.inputs.sizes(), (std::vector<int64_t>{3, 2, 5, 7}));
  EXPECT_TRUE(torch::equal(x.inputs, y.inputs));
  EXPECT_TRUE(torch::equal(x.targets, y.targets));
  EXPECT_GE(x.targets.min().item<int64_t>(), 0);
  EXPECT_LT(x.targets.max().item<int64_t>(), 4);

  // A sample is the same whatever batch it is part of.
  std::vector<int64_t> one{42};
  EXPECT_TRUE(torch::equal(a.train->getBatch(one, 0).inputs[0], x.inputs[2]));

  auto other = openDataset(synthetic({2, 5, 7}, 4, 100, 30, 12));
  EXPECT_FALSE(torch::equal(other.train->getBatch(idx, 0).inputs, x.inputs));
  // Train and test draw different samples from the same classes.
  std::vector<int64_t> first{0, 1, 2};
  EXPECT_FALSE(torch::equal(a.train->getBatch(first, 0).inputs, a.test->getBatch(first, 0).inputs));
}

TEST(DataSynthetic, RoughlyNormalised) {
  auto s = openDataset(synthetic({3, 32, 32}, 10, 256, 16, 1));
  auto x = s.train->getBatch(range(256), 0).inputs;
  EXPECT_NEAR(x.mean().item<float>(), 0.0f, 0.1f);
  EXPECT_NEAR(x.std().item<float>(), 1.0f, 0.1f);
  auto counts = torch::bincount(s.train->getBatch(range(256), 0).targets, {}, 10);
  EXPECT_GT(counts.min().item<int64_t>(), 5);  // every class is present
}

TEST(DataSynthetic, LargeShapeIsGeneratedLazily) {
  auto start = std::chrono::steady_clock::now();
  auto s = openDataset(synthetic({3, 224, 224}, 1000, 8192, 1024, 5));
  auto opened = std::chrono::steady_clock::now();
  EXPECT_LT(std::chrono::duration<double>(opened - start).count(), 1.0);
  std::vector<int64_t> idx{8191, 3};
  auto b = s.train->getBatch(idx, 0);
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{2, 3, 224, 224}));
  EXPECT_TRUE(torch::isfinite(b.inputs).all().item<bool>());

  std::vector<int64_t> batch(64);
  std::iota(batch.begin(), batch.end(), 100);
  auto t0 = std::chrono::steady_clock::now();
  auto big = s.train->getBatch(batch, 0);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ timing ] synthetic getBatch(64) of 3x224x224: " << ms << " ms\n";
  EXPECT_EQ(big.inputs.size(0), 64);
}

// Nearest class-mean on held-out samples must beat chance by far: the data
// carries a signal a model can learn, not just noise.
TEST(DataSynthetic, ClassesAreLearnable) {
  const int64_t classes = 10;
  auto s = openDataset(synthetic({1, 28, 28}, classes, 2000, 500, 77));
  auto train = s.train->getBatch(range(2000), 0);
  auto x = train.inputs.reshape({2000, -1});
  auto means = torch::zeros({classes, x.size(1)});
  means.index_add_(0, train.targets, x);
  means /= torch::bincount(train.targets, {}, classes).to(torch::kFloat).unsqueeze(1);
  // Templates differ: class means are far apart compared with their noise.
  auto gap = (means[0] - means[1]).pow(2).mean().item<float>();
  EXPECT_GT(gap, 0.3f);

  auto test = s.test->getBatch(range(500), 0);
  auto predicted = torch::cdist(test.inputs.reshape({500, -1}), means).argmin(1);
  auto accuracy = predicted.eq(test.targets).to(torch::kFloat).mean().item<float>();
  EXPECT_GT(accuracy, 0.9f);
}

TEST(DataSynthetic, BadOptionsNameTheOption) {
  auto expectError = [](DatasetOptions o, const std::string& needle) {
    try {
      openDataset(o);
      ADD_FAILURE() << "expected InputError for " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expectError(synthetic({0, 8, 8}, 10, 10, 10, 1), "channels");
  expectError(synthetic({3, -1, 8}, 10, 10, 10, 1), "height");
  expectError(synthetic({3, 8, 0}, 10, 10, 10, 1), "width");
  expectError(synthetic({3, 8, 8}, 0, 10, 10, 1), "synthetic_classes");
  expectError(synthetic({3, 8, 8}, 10, 0, 10, 1), "synthetic_train_size");
  expectError(synthetic({3, 8, 8}, 10, 10, -5, 1), "synthetic_test_size");
  expectError(synthetic({3, 100000, 100000}, 10, 10, 10, 1), "height");
  expectError(synthetic({1024, 8, 8}, 1 << 20, 10, 10, 1), "template");
}

}  // namespace
}  // namespace tandem::data
