// Telling hosts apart (cluster/host_groups): from the addresses a spec
// lists, or, under launchers that name only the coordinator, from the
// addresses workers publish through its store.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cluster/coordinator.hpp"
#include "cluster/host_groups.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "support/test_security.hpp"

namespace tandem::cluster {
namespace {

using namespace std::chrono_literals;
using Groups = std::vector<std::vector<int>>;

TEST(HostGroups, WorkersSharingAnAddressShareAGroup) {
  EXPECT_EQ(groupByAddress({"10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.3", "10.0.0.2"}),
            (Groups{{0, 2}, {1, 4}, {3}}));
  EXPECT_EQ(groupByAddress({}), Groups{});
  EXPECT_TRUE(useHostGroups({{0, 2}, {1}}, HostAggregation::kAuto));
  EXPECT_FALSE(useHostGroups({{0, 2}, {1}}, HostAggregation::kOff));
  EXPECT_FALSE(useHostGroups({{0, 1, 2}}, HostAggregation::kAuto));     // one host: no link to spare
  EXPECT_FALSE(useHostGroups({{0}, {1}, {2}}, HostAggregation::kAuto));  // one worker a host: nothing to sum first
}

TEST(HostGroups, WorkersPublishTheirAddressesAndEveryoneReadsTheSameGroups) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  const std::vector<std::string> mine = {"10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2"};
  std::vector<std::vector<std::string>> seen(mine.size());
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * w));  // arriving one by one
      CoordinatorClient client({"127.0.0.1", server.port()}, 5000ms, tandem::testing::testSecurity());
      seen[static_cast<size_t>(w)] = exchangeWorkerAddresses(client, w, 4, mine[static_cast<size_t>(w)],
                                                             Deadline::after(5000ms));
    });
  }
  for (auto& t : workers) t.join();
  for (const auto& addresses : seen) EXPECT_EQ(addresses, mine);
  EXPECT_EQ(groupByAddress(seen[3]), (Groups{{0, 2}, {1, 3}}));
}

TEST(HostGroups, AWorkerThatNeverPublishesIsNamedAtTheDeadline) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client({"127.0.0.1", server.port()}, 5000ms, tandem::testing::testSecurity());
  const auto start = Clock::now();
  try {
    exchangeWorkerAddresses(client, 0, 3, "10.0.0.1", Deadline::after(300ms));
    FAIL() << "the exchange finished without workers 1 and 2";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("no address from worker 1, worker 2"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 3s);
}

}  // namespace
}  // namespace tandem::cluster
