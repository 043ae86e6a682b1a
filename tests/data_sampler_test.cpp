// ShardSampler: epoch permutations and how ranks split each global batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "data/sampler.hpp"

namespace tandem::data {
namespace {

TEST(DataSampler, RejectsBadArguments) {
  EXPECT_THROW(ShardSampler(0, 1, 0, 1, 0), InputError);
  EXPECT_THROW(ShardSampler(10, 0, 0, 1, 0), InputError);
  EXPECT_THROW(ShardSampler(10, 2, 2, 2, 0), InputError);
  EXPECT_THROW(ShardSampler(10, 2, -1, 2, 0), InputError);
  EXPECT_THROW(ShardSampler(10, 2, 0, 0, 0), InputError);
  EXPECT_THROW(ShardSampler(10, 6, 0, 2, 0), InputError);  // 12 > 10
  EXPECT_NO_THROW(ShardSampler(10, 5, 1, 2, 0));
}

TEST(DataSampler, StepsPerEpochDropsTheTail) {
  EXPECT_EQ(ShardSampler(100, 8, 0, 3, 1).stepsPerEpoch(), 4);  // 100 / 24
  EXPECT_EQ(ShardSampler(96, 8, 2, 3, 1).stepsPerEpoch(), 4);
  EXPECT_EQ(ShardSampler(60000, 64, 0, 1, 1).stepsPerEpoch(), 937);
}

TEST(DataSampler, EpochOrderIsAPermutationAndSeedDependent) {
  ShardSampler a(1000, 10, 0, 1, 42);
  auto order = a.epochOrder(0);
  auto sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(order, ShardSampler(1000, 10, 0, 1, 42).epochOrder(0));
  EXPECT_NE(order, a.epochOrder(1));
  EXPECT_NE(order, ShardSampler(1000, 10, 0, 1, 43).epochOrder(0));
  std::vector<int64_t> identity(1000);
  for (int64_t i = 0; i < 1000; ++i) identity[i] = i;
  EXPECT_NE(order, identity);
  EXPECT_EQ(ShardSampler(1000, 10, 0, 1, 42, false).epochOrder(3), identity);
}

TEST(DataSampler, ShardsAreDisjointAndCoverTheGlobalBatch) {
  const int world = 4;
  const int64_t batch = 5;
  const int64_t size = 203;
  std::vector<ShardSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(size, batch, r, world, 9);
  const int64_t spe = ranks[0].stepsPerEpoch();
  ASSERT_EQ(spe, 10);
  ShardSampler combined(size, batch * world, 0, 1, 9);
  for (int64_t step = 0; step < 3 * spe; ++step) {
    std::vector<int64_t> global;
    for (auto& s : ranks) {
      auto part = s.batchIndices(step);
      ASSERT_EQ(static_cast<int64_t>(part.size()), batch);
      global.insert(global.end(), part.begin(), part.end());
    }
    std::set<int64_t> unique(global.begin(), global.end());
    EXPECT_EQ(unique.size(), global.size()) << "step " << step;
    // world = 1 with the combined batch sees exactly the same samples in order.
    EXPECT_EQ(global, combined.batchIndices(step)) << "step " << step;
    auto order = ranks[0].epochOrder(step / spe);
    auto begin = order.begin() + (step % spe) * batch * world;
    EXPECT_EQ(global, std::vector<int64_t>(begin, begin + batch * world));
  }
}

TEST(DataSampler, EpochCoversEachSampleAtMostOnce) {
  ShardSampler s(1000, 32, 0, 1, 5);
  std::set<int64_t> seen;
  for (int64_t step = 0; step < s.stepsPerEpoch(); ++step) {
    for (int64_t i : s.batchIndices(step)) EXPECT_TRUE(seen.insert(i).second) << i;
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), s.stepsPerEpoch() * 32);
  // A later epoch reorders.
  EXPECT_NE(s.batchIndices(0), s.batchIndices(s.stepsPerEpoch()));
}

// 4 workers take 5 global batches of epoch 1, then 3 workers go on from
// where they were: epoch 1 holds each sample at most once, and only the
// tail that no longer fills a global batch of 3 is dropped.
TEST(DataSampler, AChangeOfWorkersMidEpochGoesOnWhereTheJobWas) {
  constexpr int64_t kSize = 1000, kBatch = 16;
  std::vector<ShardSampler> four, three;
  for (int r = 0; r < 4; ++r) four.emplace_back(kSize, kBatch, r, 4, 9);
  const int64_t change = four[0].stepsPerEpoch() + 5;  // 15 steps of 64 fill epoch 0; 5 more of epoch 1
  const DataPosition at = four[0].positionAt(change);
  EXPECT_EQ(at, (DataPosition{1, 5 * 64}));
  for (int r = 0; r < 3; ++r) three.emplace_back(kSize, kBatch, r, 3, 9, true, change, at);
  std::set<int64_t> seen;
  for (int64_t step = four[0].stepsPerEpoch(); step < change; ++step) {
    for (const auto& s : four) {
      for (int64_t i : s.batchIndices(step)) ASSERT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
    }
  }
  int64_t step = change;
  for (; three[0].positionAt(step).epoch == 1; ++step) {
    for (const auto& s : three) {
      for (int64_t i : s.batchIndices(step)) ASSERT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
    }
  }
  EXPECT_EQ(step - change, (kSize - 5 * 64) / 48) << "the rest of the epoch, in global batches of 48";
  EXPECT_EQ(static_cast<int64_t>(seen.size()), 5 * 64 + (step - change) * 48);
  EXPECT_LT(kSize - static_cast<int64_t>(seen.size()), 48) << "only a tail short of one global batch is dropped";
  // Epoch 1's order is the one the four workers were taking: the three go on in it.
  const std::vector<int64_t> order = four[0].epochOrder(1);
  EXPECT_EQ(three[0].batchIndices(change), std::vector<int64_t>(order.begin() + 320, order.begin() + 336));
  // Then epoch 2 starts at its beginning, in global batches of 48.
  EXPECT_EQ(three[0].positionAt(step), (DataPosition{2, 0}));
  EXPECT_EQ(three[2].positionAt(step + 1), (DataPosition{2, 48}));
  // An origin whose epoch has no room left for a global batch starts the next.
  ShardSampler full(kSize, kBatch, 0, 3, 9, true, 40, DataPosition{0, 990});
  EXPECT_EQ(full.positionAt(40), (DataPosition{1, 0}));
  EXPECT_THROW(ShardSampler(kSize, kBatch, 0, 3, 9, true, 40, DataPosition{0, 1001}), InputError);
}

TEST(DataSampler, UnshuffledIsSequential) {
  ShardSampler s(20, 3, 1, 2, 5, false);
  EXPECT_EQ(s.batchIndices(0), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(s.batchIndices(1), (std::vector<int64_t>{9, 10, 11}));
  EXPECT_EQ(s.batchIndices(3), (std::vector<int64_t>{3, 4, 5}));  // epoch 1
}

TEST(DataSampler, ConcurrentCallsAgreeWithSequentialOnes) {
  ShardSampler s(5000, 16, 1, 2, 77);
  const int64_t steps = 4 * s.stepsPerEpoch();
  std::vector<std::vector<int64_t>> expected;
  ShardSampler fresh(5000, 16, 1, 2, 77);
  for (int64_t step = 0; step < steps; ++step) expected.push_back(fresh.batchIndices(step));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      // Threads walk in opposite directions to make the cache thrash.
      for (int64_t k = 0; k < steps; ++k) {
        int64_t step = (t % 2 == 0) ? k : steps - 1 - k;
        if (s.batchIndices(step) != expected[step]) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace tandem::data
