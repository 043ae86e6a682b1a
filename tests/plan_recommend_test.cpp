// The planner's recommendation: the fastest of Tandem's layouts and group
// sizes, the simplest of those within 1%.
#include <gtest/gtest.h>

#include "plan/recommend.hpp"

namespace tandem::plan {
namespace {

const Workload kWork{0.05, 0.10, 100e6, 32};

TEST(Recommend, OneHostNeedsNoLinkSoTheSimplestLayoutWins) {
  const Recommendation r = recommend(kWork, {1, 4, 1.25e9, 50e-6}, {});
  EXPECT_EQ(r.layout.algorithm, Algorithm::kRingAllReduce);
  EXPECT_DOUBLE_EQ(r.group_bytes, 64.0 * 1024 * 1024);  // the fewest messages
  EXPECT_DOUBLE_EQ(r.prediction.step_s, 0.15);
}

TEST(Recommend, ARingOfManyHostsOnSlowHopsLosesToServersOnEveryHost) {
  // 64 hosts x 1 worker, 1 ms a hop: a ring pays 2 x 63 ms per bucket, a
  // chunk's push and pull 2 ms, for the same bytes on each host link.
  const Cluster c{64, 1, 1.25e9, 1e-3};
  const Recommendation r = recommend(kWork, c, {});
  EXPECT_EQ(r.layout.algorithm, Algorithm::kPsColocated);
  EXPECT_EQ(r.layout.servers, 64);
  // Nothing tried is more than 1% faster.
  for (double mib = 64; mib >= 0.25; mib /= 2) {
    for (const Layout& l : {Layout{Algorithm::kRingAllReduce, 0}, Layout{Algorithm::kPsColocated, 64}}) {
      EXPECT_LE(predictTandem(kWork, c, l, {mib * 1024 * 1024}).samples_per_s,
                r.prediction.samples_per_s / 0.99 + 1e-9);
    }
  }
}

TEST(Recommend, AFixedCostPerMessageFavoursLargerGroups) {
  // 2 hosts, compute-bound either way: without a message cost the smallest
  // buckets hide the most; at 10 ms a message, fewer and larger ones win.
  const Cluster c{2, 1, 1.25e9, 0};
  const Recommendation free = recommend(kWork, c, {});
  const Recommendation costly = recommend(kWork, c, {0, 0, 10e-3});
  EXPECT_LT(free.group_bytes, costly.group_bytes);
  EXPECT_LE(free.prediction.step_s, 0.15 * 1.01);
}

}  // namespace
}  // namespace tandem::plan
