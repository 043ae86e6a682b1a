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
