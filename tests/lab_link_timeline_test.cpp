// The lab's link counters as timeline counter tracks: rates per interval in
// emulated Mbit/s, one track per host, ending at zero.
#include <gtest/gtest.h>

#include "lab/link_timeline.hpp"

namespace tandem::lab {
namespace {

TEST(LinkTimeline, EachIntervalCarriesItsMeanRateOnTheEmulatedLink) {
  // Two hosts, sampled at t = 100.0, 100.1 and 100.3 s. Host 0 sends
  // 1,250,000 bytes in the first 0.1 s: 100 Mbit/s real, 400 at dilation 4.
  const std::vector<CounterSample> samples = {
      {100.0, {{1'000, 5'000}, {0, 0}}},
      {100.1, {{1'251'000, 5'000}, {0, 62'500}}},
      {100.3, {{1'251'000, 130'000}, {0, 62'500}}},
  };
  const nlohmann::json events = linkCounterEvents(samples, 4);
  ASSERT_EQ(events.size(), 1u + 2 * 2 + 2);  // the name, 2 intervals x 2 hosts, a closing zero per host
  EXPECT_EQ(events[0]["ph"], "M");
  EXPECT_EQ(events[0]["pid"], kLinkTimelinePid);

  auto at = [&](size_t i) { return events[i]; };
  EXPECT_EQ(at(1)["ph"], "C");
  EXPECT_EQ(at(1)["name"], "host 0 link");
  EXPECT_EQ(at(1)["ts"], 100'000'000);
  EXPECT_NEAR(at(1)["args"]["sent"].get<double>(), 400.0, 1e-6);
  EXPECT_NEAR(at(1)["args"]["received"].get<double>(), 0.0, 1e-12);
  EXPECT_EQ(at(2)["name"], "host 1 link");
  EXPECT_NEAR(at(2)["args"]["received"].get<double>(), 62'500 * 8 / 0.1 / 1e6 * 4, 1e-6);  // 20 Mbit/s
  // 125,000 bytes over 0.2 s: 5 Mbit/s real, 20 emulated.
  EXPECT_EQ(at(3)["ts"], 100'100'000);
  EXPECT_NEAR(at(3)["args"]["sent"].get<double>(), 0.0, 1e-12);
  EXPECT_NEAR(at(3)["args"]["received"].get<double>(), 20.0, 1e-6);
  EXPECT_EQ(at(5)["ts"], 100'300'000);
  EXPECT_EQ(at(5)["args"]["sent"], 0.0);
  EXPECT_EQ(at(6)["name"], "host 1 link");
}

TEST(LinkTimeline, FewerThanTwoSamplesGiveNoRates) {
  EXPECT_EQ(linkCounterEvents({}, 1).size(), 1u);
  EXPECT_EQ(linkCounterEvents({{1.0, {{5, 5}}}}, 1).size(), 1u);
}

TEST(LinkTimeline, ACounterThatFellReadsAsIdle) {
  const nlohmann::json events = linkCounterEvents({{1.0, {{500, 0}}}, {2.0, {{100, 0}}}}, 1);
  EXPECT_EQ(events[1]["args"]["sent"], 0.0);
}

}  // namespace
}  // namespace tandem::lab
