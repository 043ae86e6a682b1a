#include "cluster/kv_store.hpp"
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench/allreduce_bench.hpp"
#include "support/expect_input_error.hpp"

namespace tandem::bench {
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

TEST(AllreduceBenchVerify, AcceptsTheExactSumAndNamesTheFirstWrongElement) {
  constexpr size_t kCount = 50;
  std::vector<float> sum(kCount, 0.0f), part(kCount);
  for (int rank = 0; rank < 3; ++rank) {
    fillAllreducePattern(part.data(), kCount, rank);
    for (size_t i = 0; i < kCount; ++i) sum[i] += part[i];
  }
  EXPECT_EQ(allreduceMismatch(sum.data(), kCount, 3), "");
  EXPECT_NE(allreduceMismatch(sum.data(), kCount, 2), "") << "the sum over 3 ranks passed for 2";
  sum[9] += 1;  // element 9: (9 % 7 + 1) * 6 = 18
  EXPECT_EQ(allreduceMismatch(sum.data(), kCount, 3), "element 9 is 19, expected 18");
}

// One rank whose all-reduce is the identity (right for one rank), except
// that call number `corrupt_call` adds 1 to element 3.
class CorruptingCommunicator final : public collective::Communicator {
 public:
  explicit CorruptingCommunicator(int corrupt_call) : corrupt_call_(corrupt_call) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduceSum(float* data, size_t count) override {
    if (calls_++ == corrupt_call_ && count > 3) data[3] += 1;
  }
  void allreduceSumOnce(float* data, size_t count) override { allreduceSum(data, count); }
  void allreduceSum16(void*, size_t, WireDtype) override {}
  void allreduce(void*, size_t, collective::ElementType, collective::Reduction) override {}
  void broadcast(void*, size_t, int) override {}
  void allgather(const void* in, void* out, size_t bytes) override { std::memmove(out, in, bytes); }
  void alltoallv(const void* in, const std::vector<size_t>& send, void* out, const std::vector<size_t>&) override {
    std::memmove(out, in, send[0]);
  }
  void barrier() override {}
  void abandon() override {}
  int calls() const { return calls_; }

 private:
  int corrupt_call_;
  int calls_ = 0;
};

TEST(AllreduceBenchRun, ExactWhenEverySumIsRight) {
  CorruptingCommunicator never(-1);
  auto rows = runAllreduceBench(never, {4096, 65536});
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_TRUE(row.exact) << row.bytes << ": " << row.mismatch;
    EXPECT_EQ(row.mismatch, "");
  }
  // A real (single-rank) communicator too.
  cluster::MemoryStore store;
  auto solo = collective::Communicator::connect(store, {});
  EXPECT_TRUE(runAllreduceBench(*solo, {4096}).at(0).exact);
}

TEST(AllreduceBenchRun, NotExactWhenTheFirstSumIsWrong) {
  CorruptingCommunicator first(0);
  auto rows = runAllreduceBench(first, {4096});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_FALSE(rows[0].exact);
  EXPECT_EQ(rows[0].mismatch, "wrong on the first call on rank 0: element 3 is 5, expected 4");
}

TEST(AllreduceBenchRun, NotExactWhenOnlyTheLastSumIsWrong) {
  CorruptingCommunicator probe(-1);
  runAllreduceBench(probe, {4096});
  CorruptingCommunicator last(probe.calls() - 1);
  auto rows = runAllreduceBench(last, {4096, 8192});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[0].exact);
  EXPECT_EQ(rows[0].mismatch, "wrong after the timed iterations on rank 0: element 3 is 5, expected 4");
  EXPECT_TRUE(rows[1].exact) << "a wrong size must not spoil the next one: " << rows[1].mismatch;
}

}  // namespace
}  // namespace tandem::bench
