#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "train/fragment_schedule.hpp"

namespace tandem::train {
namespace {

// The fragments whose exchange starts after each step in [1, steps).
std::vector<int> startsOver(const FragmentSchedule& s, int64_t steps) {
  std::vector<int> out;
  for (int64_t step = 1; step < steps; ++step) out.push_back(s.startingAfter(step).value_or(-1));
  return out;
}

TEST(FragmentSchedule, StaggersTheFragmentsOverEachRound) {
  const FragmentSchedule s(10, 3, 0);
  EXPECT_EQ(s.offset(0), 3);
  EXPECT_EQ(s.offset(1), 6);
  EXPECT_EQ(s.offset(2), 10);
  EXPECT_EQ(startsOver(s, 21), (std::vector<int>{-1, -1, 0, -1, -1, 1, -1, -1, -1, 2,  //
                                                 -1, -1, 0, -1, -1, 1, -1, -1, -1, 2}));
}

TEST(FragmentSchedule, OneFragmentIsDiloco) {
  const FragmentSchedule s(4, 1, 0);
  EXPECT_EQ(startsOver(s, 9), (std::vector<int>{-1, -1, -1, 0, -1, -1, -1, 0}));
  EXPECT_EQ(s.startsThrough(0, 7), 1);
  EXPECT_EQ(s.startsThrough(0, 8), 2);
}

TEST(FragmentSchedule, EveryStepWhenFragmentsEqualLocalSteps) {
  const FragmentSchedule s(4, 4, 0);
  EXPECT_EQ(startsOver(s, 9), (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
}

TEST(FragmentSchedule, CountsStartsPerFragmentAndBetweenSteps) {
  const FragmentSchedule s(10, 2, 2);
  EXPECT_EQ(s.startsThrough(0, 4), 0);
  EXPECT_EQ(s.startsThrough(0, 5), 1);
  EXPECT_EQ(s.startsThrough(1, 29), 2);
  // Starts after steps 5, 10, 15, 20, 25: the last step (30) exchanges all instead.
  EXPECT_EQ(s.startsBetween(0, 30), 5);
  EXPECT_EQ(s.startsBetween(10, 30), 3);
}

// Chunk 0 goes with the round's end, as in plain DiLoCo.
TEST(FragmentSchedule, ChunksAreStridedOverTheModel) {
  const FragmentSchedule s(10, 3, 0);
  EXPECT_EQ(s.chunksOf(2, 7), (std::vector<size_t>{0, 3, 6}));
  EXPECT_EQ(s.chunksOf(1, 7), (std::vector<size_t>{1, 4}));
  EXPECT_EQ(s.chunksOf(0, 2), (std::vector<size_t>{}));
  for (size_t c = 0; c < 7; ++c) EXPECT_EQ(s.fragmentOf(c), 2 - static_cast<int>(c % 3)) << c;
}

TEST(FragmentSchedule, ClocksOfAResumedRun) {
  const FragmentSchedule s(10, 2, 1);
  // A run over steps 1-23 started exchanges after 5, 10, 15, 20 and
  // exchanged both fragments after 23.
  EXPECT_EQ(FragmentClocks::chunkAt(s, 0, 0), 0);
  EXPECT_EQ(FragmentClocks::chunkAt(s, 0, 23), 3);
  EXPECT_EQ(FragmentClocks::chunkAt(s, 1, 23), 3);
  EXPECT_EQ(FragmentClocks::chunkAt(s, 1, 20), 2);  // a run ending at 20 exchanged all there
  EXPECT_EQ(FragmentClocks::reportsAt(s, 0), 0);
  EXPECT_EQ(FragmentClocks::reportsAt(s, 23), 5);
  EXPECT_EQ(FragmentClocks::reportsAfter(s, 0, 23), 5);
  // On from 23 to 40: starts after 25, 30, 35, then all after 40.
  EXPECT_EQ(FragmentClocks::reportsAfter(s, 23, 40), 9);
}

TEST(FragmentSchedule, RefusesADelayReachingTheNextStart) {
  EXPECT_THROW(FragmentSchedule(10, 2, 5), Error);
  EXPECT_THROW(FragmentSchedule(10, 11, 0), Error);
  EXPECT_NO_THROW(FragmentSchedule(10, 2, 4));
}

}  // namespace
}  // namespace tandem::train
