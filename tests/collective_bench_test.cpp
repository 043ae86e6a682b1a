#include <gtest/gtest.h>

#include "collective/allreduce_bench.hpp"
#include "support/expect_input_error.hpp"

namespace tandem::collective {
namespace {

TEST(AllreduceBenchSizes, RangesStepByFourAndListsAreTakenAsGiven) {
  EXPECT_EQ(parseByteSizes("4K..256K"), (std::vector<size_t>{4096, 16384, 65536, 262144}));
  EXPECT_EQ(parseByteSizes("1M"), (std::vector<size_t>{1 << 20}));
  EXPECT_EQ(parseByteSizes("64K,1M,8"), (std::vector<size_t>{65536, 1 << 20, 8}));
  EXPECT_EQ(parseByteSizes("4K..256M").size(), 9u);
}

TEST(AllreduceBenchSizes, BadSizesNameTheFlag) {
  for (const char* text : {"", "x", "3", "4K..1K", "5Q", "0", "4K,,8K"}) {
    testing::expectInputError([&] { parseByteSizes(text); }, {"--sizes"});
  }
}

TEST(AllreduceBenchLoopback, MeasuresAPositiveRate) {
  EXPECT_GT(measureLoopbackTcpGbps(size_t{64} << 20), 0.0);
}

}  // namespace
}  // namespace tandem::collective
