#include "collective/bucket_size.hpp"

#include <gtest/gtest.h>

namespace tandem::collective {
namespace {

// --bucket-mb 0: about 16 buckets, none under 256 KiB nor over 4 MiB.
TEST(AutoBucketFloats, SixteenBucketsWithinTheirBounds) {
  EXPECT_EQ(autoBucketFloats(269722), 65536);      // resnet20, 1.08 MB: 256 KiB buckets (5)
  EXPECT_EQ(autoBucketFloats(1727962), 107998);    // resnet110, 6.9 MB: 16 buckets of 432 KB
  EXPECT_EQ(autoBucketFloats(60192808), 1 << 20);  // resnet152, 241 MB: 4 MiB buckets
  EXPECT_EQ(autoBucketFloats(1), 65536);
  for (int64_t floats : {int64_t{1} << 20, int64_t{3} << 20, int64_t{16} << 20}) {
    const int64_t buckets = (floats + autoBucketFloats(floats) - 1) / autoBucketFloats(floats);
    EXPECT_EQ(buckets, 16) << floats;
  }
}

}  // namespace
}  // namespace tandem::collective
