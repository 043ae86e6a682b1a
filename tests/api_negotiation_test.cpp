// The agreement before each public collective, replayed without sockets:
// what every rank decides from every rank's announcement.
#include "api/negotiation.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace tandem::api {
namespace {

Announcement allreduce(int64_t count, uint64_t signature) {
  Announcement a;
  a.kind = CallKind::kAllreduce;
  a.dtype = 6;  // float32
  a.count = count;
  a.signature = signature;
  return a;
}

Announcement joined(bool first = false) {
  Announcement a;
  a.kind = CallKind::kJoin;
  a.first_join = first ? 1 : 0;
  return a;
}

TEST(Negotiation, RanksThatAgreeRunTheCall) {
  const Agreement g = agree({allreduce(5, 7), allreduce(5, 7), allreduce(5, 7)});
  EXPECT_TRUE(g.error.empty()) << g.error;
  EXPECT_FALSE(g.all_joined);
  EXPECT_EQ(g.call.kind, CallKind::kAllreduce);
  EXPECT_EQ(g.call.count, 5);
  EXPECT_TRUE(g.joined.empty());
}

TEST(Negotiation, ADifferentCallNamesTheRanksAndBothCalls) {
  Announcement gather;
  gather.kind = CallKind::kAllgather;
  gather.count = 2;
  const Agreement g = agree({allreduce(3, 1), allreduce(4, 2), gather});
  EXPECT_EQ(g.error.rfind("rank 0 called allreduce (sum) of 3 float32 values, but rank(s) 1, 2 called allreduce "
                          "(sum) of 4 float32 values",
                          0),
            0u)
      << g.error;
}

TEST(Negotiation, AllgatherRowsMayDifferAndAreReportedPerRank) {
  Announcement a;
  a.kind = CallKind::kAllgather;
  a.signature = 9;
  std::vector<Announcement> all(3, a);
  for (int r = 0; r < 3; ++r) all[r].count = r + 1;
  const Agreement g = agree(all);
  EXPECT_TRUE(g.error.empty()) << g.error;
  EXPECT_EQ(g.counts, (std::vector<int64_t>{1, 2, 3}));
}

TEST(Negotiation, ARankThatRefusedItsArgumentsIsNamedToTheOthers) {
  Announcement bad = allreduce(0, 0);
  bad.kind = CallKind::kAlltoall;
  bad.invalid = 1;
  Announcement good = bad;
  good.invalid = 0;
  const Agreement g = agree({good, bad});
  EXPECT_NE(g.error.find("rank(s) 1 refused their own arguments to alltoall"), std::string::npos) << g.error;
}

TEST(Negotiation, JoinedRanksServeReductionsAndOptimizerSteps) {
  Announcement step;
  step.kind = CallKind::kGradients;
  step.signature = 42;
  for (const Announcement& call : {allreduce(8, 3), step}) {
    const Agreement g = agree({call, joined(), joined(true)});
    EXPECT_TRUE(g.error.empty()) << g.error;
    EXPECT_FALSE(g.all_joined);
    EXPECT_EQ(g.joined, (std::vector<int>{1, 2}));
    EXPECT_EQ(g.call.kind, call.kind);
    EXPECT_EQ(g.call.signature, call.signature);
  }
}

TEST(Negotiation, OtherCallsWhileARankHasJoinedAreRefusedOnEveryRank) {
  Announcement gather;
  gather.kind = CallKind::kAllgather;
  const Agreement g = agree({gather, joined()});
  EXPECT_NE(g.error.find("allgather of 0 rows of uint8 on rank(s) 0 while rank(s) 1 have called join()"),
            std::string::npos)
      << g.error;
}

TEST(Negotiation, WhenEveryRankHasJoinedTheLastToJoinIsNamed) {
  // Ranks 0 and 2 joined in earlier rounds; rank 1 joins now, last.
  const Agreement g = agree({joined(), joined(true), joined()});
  EXPECT_TRUE(g.all_joined);
  EXPECT_EQ(g.last_joined, 1);
  // Two join in the same round: the higher rank is named, on every rank alike.
  EXPECT_EQ(agree({joined(true), joined(), joined(true)}).last_joined, 2);
}

}  // namespace
}  // namespace tandem::api
