#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/ps_apply_bench.hpp"
#include "support/expect_input_error.hpp"

namespace tandem::bench {
namespace {

// A few KB and no minimum time: three passes per kernel, well under a second.
TEST(PsApplyBench, ReportsEveryKernelInOrderAgainstMemcpy) {
  const auto rows = runApplyBench(4096, 0.0);
  std::vector<std::string> kernels;
  for (const auto& r : rows) kernels.push_back(r.kernel);
  EXPECT_EQ(kernels, (std::vector<std::string>{"memcpy", "sgd-momentum", "sgd-momentum, delay-compensated",
                                                "sgd-momentum, delay-compensated, constant lambda",
                                                "sgd-momentum, delay-compensated in two passes",
                                                "async push and pull, sgd-momentum",
                                                "async push and pull, delay-compensated",
                                                "async push and pull, delay-compensated, constant lambda", "adam",
                                                "sum of 4 gradients"}));
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].vs_memcpy, 1.0);
  for (const auto& r : rows) {
    EXPECT_GT(r.seconds, 0.0) << r.kernel;
    EXPECT_DOUBLE_EQ(r.gbps, 4096 * 4 / r.seconds / 1e9) << r.kernel;
    EXPECT_DOUBLE_EQ(r.vs_memcpy, r.gbps / rows[0].gbps) << r.kernel;
  }
}

TEST(PsApplyBench, AnEmptyBufferNamesTheFlag) {
  testing::expectInputError([] { runApplyBench(0, 0.0); }, {"--mb", "at least one float"});
}

}  // namespace
}  // namespace tandem::bench
