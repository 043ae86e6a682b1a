// GradientBuckets without a network: what the hooks write and when buckets
// are handed over, observed through the launch callback.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "train/gradient_buckets.hpp"

namespace tandem::train {
namespace {

// Three layers registered a, b, c: backward produces c's gradients first.
struct ThreeLayers : torch::nn::Module {
  ThreeLayers() {
    a = register_module("a", torch::nn::Linear(4, 8));
    b = register_module("b", torch::nn::Linear(8, 8));
    c = register_module("c", torch::nn::Linear(8, 2));
  }
  torch::Tensor forward(torch::Tensor x) { return c(torch::relu(b(torch::relu(a(x))))); }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};

struct Recorder {
  std::vector<size_t> launched;
  std::vector<torch::Tensor> copies;
  int tails_filled = 0;
};

std::unique_ptr<GradientBuckets> makeBuckets(ThreeLayers& model, size_t cap_bytes, Recorder& rec) {
  return std::make_unique<GradientBuckets>(
      model, cap_bytes, 3,
      [&rec](size_t bucket, torch::Tensor flat) {
        rec.launched.push_back(bucket);
        rec.copies.push_back(flat.clone());
      },
      [&rec] { ++rec.tails_filled; });
}

TEST(GradientBuckets, ReverseOrderBucketsLaunchInIndexOrderWithScaledGradients) {
  torch::manual_seed(1);
  ThreeLayers model;
  Recorder rec;
  // Parameters go in reverse registration order: c.bias (2), c.weight (16),
  // b.bias (8), b.weight (64), a.bias (8), a.weight (32). A 90-float cap
  // packs c and b into bucket 0 and a into bucket 1.
  auto buckets = makeBuckets(model, 90 * sizeof(float), rec);
  ASSERT_EQ(buckets->size(), 2u);
  EXPECT_EQ(buckets->bucketBytes(0), (18 + 72) * sizeof(float));
  EXPECT_EQ(buckets->bucketBytes(1), (40 + 3) * sizeof(float));  // + 3 tail floats

  auto x = torch::randn({5, 4});
  buckets->beginMicroStep(0, /*last=*/true, 0.5);
  model.forward(x).sum().backward();
  EXPECT_EQ(rec.launched, (std::vector<size_t>{0, 1}));  // both full before flush
  EXPECT_EQ(rec.tails_filled, 1);
  buckets->flush();
  EXPECT_EQ(rec.launched.size(), 2u);  // nothing launched twice

  // Bucket 0 holds c then b, each gradient times 0.5; .grad is not touched
  // until exposeGradients.
  torch::Tensor expected0 = torch::cat({model.c->bias.grad().flatten(), model.c->weight.grad().flatten(),
                                        model.b->bias.grad().flatten(), model.b->weight.grad().flatten()}) * 0.5;
  EXPECT_TRUE(torch::allclose(rec.copies[0], expected0));
  torch::Tensor a_weight_grad = model.a->weight.grad().clone();
  buckets->exposeGradients();
  EXPECT_TRUE(torch::allclose(model.a->weight.grad(), a_weight_grad * 0.5));
}

TEST(GradientBuckets, AccumulatesMicroStepsAndLaunchesOnlyOnTheLast) {
  torch::manual_seed(2);
  ThreeLayers model;
  Recorder rec;
  auto buckets = makeBuckets(model, size_t{1} << 20, rec);
  ASSERT_EQ(buckets->size(), 1u);
  auto x1 = torch::randn({3, 4});
  auto x2 = torch::randn({3, 4});
  buckets->beginMicroStep(0, false, 0.25);
  model.forward(x1).sum().backward();
  EXPECT_TRUE(rec.launched.empty());
  buckets->beginMicroStep(1, true, 0.25);
  model.forward(x2).sum().backward();
  ASSERT_EQ(rec.launched.size(), 1u);
  // .grad accumulated both micro-steps (autograd); the bucket holds a quarter of that.
  buckets->flush();
  torch::Tensor summed = model.a->weight.grad().clone();
  buckets->exposeGradients();
  EXPECT_TRUE(torch::allclose(model.a->weight.grad(), summed * 0.25));
}

TEST(GradientBuckets, FlushZeroFillsParametersWithoutGradientsAndLaunchesTheRest) {
  torch::manual_seed(3);
  ThreeLayers model;
  Recorder rec;
  auto buckets = makeBuckets(model, 90 * sizeof(float), rec);
  // A stale value in a's slot from an earlier step must not survive.
  buckets->beginMicroStep(0, true, 1.0);
  model.forward(torch::randn({2, 4})).sum().backward();
  buckets->flush();
  rec.launched.clear();
  rec.copies.clear();
  // Only c is used: b and a get no gradient this step.
  buckets->beginMicroStep(0, true, 1.0);
  model.c->forward(torch::randn({2, 8})).sum().backward();
  EXPECT_TRUE(rec.launched.empty());  // bucket 0 still waits for b
  buckets->flush();
  ASSERT_EQ(rec.launched, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(rec.copies[0].narrow(0, 18, 72).abs().sum().item<float>(), 0.0f);  // b zeroed
  EXPECT_EQ(rec.copies[1].narrow(0, 0, 40).abs().sum().item<float>(), 0.0f);   // a zeroed
  EXPECT_GT(rec.copies[0].narrow(0, 0, 18).abs().sum().item<float>(), 0.0f);   // c kept
}

}  // namespace
}  // namespace tandem::train
