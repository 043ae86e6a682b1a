// The tf1-ps model of the users' TensorFlow 1 layout, against hand-computed cases.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "plan/tf1_ps_model.hpp"

namespace tandem::plan {
namespace {

TEST(Tf1PsModel, RoundRobinAfterGlobalStepPutsEveryFourthVariableTogether) {
  // A conv's weights, beta, moving mean and moving variance: with 2 or 4
  // servers every conv's weights land on the same server.
  EXPECT_EQ(roundRobinPlacement(8, 2), (std::vector<int>{1, 0, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(roundRobinPlacement(8, 4), (std::vector<int>{1, 2, 3, 0, 1, 2, 3, 0}));
}

TEST(Tf1PsModel, TheSlowestOfWorkerStreamPsAndLinksFollowsAnUnoverlappedStep) {
  // Two "convs" of 40 MB weights and three 1 MB batch-norm variables each:
  // S = 86 MB. Compute 0.1 + 0.2 s, batch 32.
  const std::vector<double> vars = {40e6, 1e6, 1e6, 1e6, 40e6, 1e6, 1e6, 1e6};
  const Workload w{0.1, 0.2, 86e6, 32};
  const Tf1PsCosts costs{100e6, 400e6, 0};
  // 1 host, 1 worker: its stream moves 2 x 86 MB at 100 MB/s = 1.72 s; the
  // PS 172 MB at 400 MB/s = 0.43 s.
  const Tf1PsPrediction one = predictTf1Ps(w, {1, 1, 1.25e9, 0}, vars, costs);
  EXPECT_NEAR(one.comm_s, 1.72, 1e-12);
  EXPECT_NEAR(one.step_s, 0.3 + 1.72, 1e-12);
  EXPECT_EQ(one.bottleneck, "worker stream");
  // 2 hosts x 4 workers: slots 1,0,1,0,...: both 40 MB weights on PS 1
  // (82 MB of 86). PS 1 moves 8 x 2 x 82 MB at 400 MB/s = 3.28 s.
  const Tf1PsPrediction two = predictTf1Ps(w, {2, 4, 1.25e9, 0}, vars, costs);
  EXPECT_NEAR(two.busiest_server_share, 82.0 / 86.0, 1e-12);
  EXPECT_NEAR(two.comm_s, 3.28, 1e-12);
  EXPECT_EQ(two.bottleneck, "busiest PS");
  EXPECT_NEAR(two.samples_per_s, 8 * 32 / (0.3 + 3.28), 1e-9);
  // A slow link: host 1's link carries 4 remote workers x 82 MB out plus its
  // own 4 workers' 4 MB to PS 0: 344 MB at 100 MB/s = 3.44 s.
  const Tf1PsPrediction slow = predictTf1Ps(w, {2, 4, 100e6, 0}, vars, costs);
  EXPECT_NEAR(slow.comm_s, 3.44, 1e-12);
  EXPECT_EQ(slow.bottleneck, "links");
  // A per-message cost: PS 1 holds 4 variables, 8 workers x 2 directions.
  const Tf1PsPrediction chatty = predictTf1Ps(w, {2, 4, 1.25e9, 0}, vars, {100e6, 400e6, 1e-3});
  EXPECT_NEAR(chatty.comm_s, 3.28 + 8 * 2 * 4 * 1e-3, 1e-12);
  // Greedy placement (each variable on the emptiest PS so far) splits the
  // weights: 40 on PS 0, then 1+1+1+40 on PS 1, then 1+1+1 on PS 0: 43 MB
  // each, 8 x 2 x 43 / 400.
  Tf1PsCosts greedy = costs;
  greedy.placement = VariablePlacement::kGreedyBySize;
  const Tf1PsPrediction balanced = predictTf1Ps(w, {2, 4, 1.25e9, 0}, vars, greedy);
  EXPECT_EQ(greedyPlacement(vars, 2), (std::vector<int>{0, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_NEAR(balanced.busiest_server_share, 0.5, 1e-12);
  EXPECT_NEAR(balanced.comm_s, 8 * 2 * 43e6 / 400e6, 1e-12);
}

TEST(Tf1PsModel, RefusesAnEmptyModelAndZeroRates) {
  EXPECT_THROW(predictTf1Ps({0, 1, 1, 1}, {1, 1, 1e9, 0}, {}, {}), InputError);
  EXPECT_THROW(predictTf1Ps({0, 1, 1, 1}, {1, 1, 1e9, 0}, {1.0}, {0, 1, 0}), InputError);
}

}  // namespace
}  // namespace tandem::plan
