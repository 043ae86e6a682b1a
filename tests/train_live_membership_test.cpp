// What a member behind the job copies from the round's source: the model
// and the optimizer's state, byte for byte, through the broadcast the new
// communicator runs (replayed here from the source's sends).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <vector>

#include "train/live_membership.hpp"

namespace tandem::train {
namespace {

struct Replica {
  torch::nn::Sequential model{torch::nn::Linear(6, 4), torch::nn::BatchNorm1d(4), torch::nn::Linear(4, 2)};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

void stepOn(Replica& r, const torch::Tensor& x) {
  r.optimizer->zero_grad();
  r.model->forward(x).square().sum().backward();
  r.optimizer->step();
}

std::vector<torch::Tensor> stateOf(Replica& r) {
  std::vector<torch::Tensor> out;
  for (const auto& t : r.model->parameters()) out.push_back(t.detach().clone());
  for (const auto& t : r.model->buffers()) out.push_back(t.detach().clone());
  return out;
}

template <class MakeOptimizer>
void healsAndStepsAlike(MakeOptimizer make) {
  torch::manual_seed(1);
  Replica source, joiner;
  source.optimizer = make(source.model->parameters());
  joiner.optimizer = make(joiner.model->parameters());  // fresh: other weights, no state
  const torch::Tensor x = torch::randn({8, 6});
  for (int i = 0; i < 3; ++i) stepOn(source, x);

  std::vector<std::vector<char>> sent;
  healFromSource(*source.model, source.optimizer.get(), true, [&](void* data, size_t bytes) {
    sent.emplace_back(static_cast<char*>(data), static_cast<char*>(data) + bytes);
  });
  size_t next = 0;
  healFromSource(*joiner.model, joiner.optimizer.get(), false, [&](void* data, size_t bytes) {
    ASSERT_LT(next, sent.size());
    ASSERT_EQ(bytes, sent[next].size());
    std::memcpy(data, sent[next].data(), bytes);
    ++next;
  });
  EXPECT_EQ(next, sent.size()) << "the joiner made every broadcast the source made";
  auto a = stateOf(source), b = stateOf(joiner);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " after healing";
  // The optimizer's state came too: the next step is the same on both.
  const torch::Tensor y = torch::randn({8, 6});
  stepOn(source, y);
  stepOn(joiner, y);
  a = stateOf(source);
  b = stateOf(joiner);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " one step on";
}

TEST(HealFromSource, SgdWithMomentumStepsAlikeAfterwards) {
  healsAndStepsAlike([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  });
}

TEST(HealFromSource, AdamWithItsStepCountsStepsAlikeAfterwards) {
  healsAndStepsAlike([](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
  });
}

}  // namespace
}  // namespace tandem::train
