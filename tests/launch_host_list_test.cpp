// launch --hosts and --hostfile: host lists parsed as horovodrun and Open
// MPI write them, bad entries named, and a job's tasks placed on the hosts.
#include "launch/host_list.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "support/expect_input_error.hpp"

namespace tandem::launch {
namespace {

using tandem::testing::inputErrorOf;

TEST(HostListTest, ParsesHostsSlotsAndBracketedIpv6) {
  EXPECT_EQ(parseHostList("h1:4,h2:4"), (std::vector<HostSlots>{{"h1", 4}, {"h2", 4}}));
  EXPECT_EQ(parseHostList("node-7, [::1]:2 ,10.0.0.3"),
            (std::vector<HostSlots>{{"node-7", 1}, {"::1", 2}, {"10.0.0.3", 1}}));
  EXPECT_EQ(parseHostSlots("[fe80::1]"), (HostSlots{"fe80::1", 1}));
}

TEST(HostListTest, ABadEntryIsNamed) {
  EXPECT_EQ(inputErrorOf([] { parseHostList("h1:4,h2:0"); }),
            "--hosts 'h1:4,h2:0': entry 'h2:0' is not host or host:slots (slots 1 to 4096; an IPv6 address in "
            "brackets)");
  for (const char* bad : {"h1:", ":4", "h1:4x", "::1:2", "[::1", "[::1]x", "h 1:2", "", "h1:99999"}) {
    EXPECT_FALSE(parseHostSlots(bad).has_value()) << bad;
  }
  EXPECT_NE(inputErrorOf([] { parseHostList("h1,,h2"); }).find("entry ''"), std::string::npos);
  EXPECT_EQ(inputErrorOf([] { parseHostList("h1:2,h1:2"); }),
            "--hosts 'h1:2,h1:2': host 'h1' is listed twice; give it once with all its slots");
}

TEST(HostListTest, ReadsOpenMpiAndHorovodHostfiles) {
  const std::string file = "# the job's hosts\nh1 slots=4\n\nh2:2   # two GPUs\n  h3  \n[::1] slots=3\n";
  EXPECT_EQ(parseHostfile(file, "hosts.txt"),
            (std::vector<HostSlots>{{"h1", 4}, {"h2", 2}, {"h3", 1}, {"::1", 3}}));
}

TEST(HostListTest, ABadHostfileLineIsNamedWithFileAndNumber) {
  EXPECT_EQ(inputErrorOf([] { parseHostfile("h1 slots=2\nh2 slot=2\n", "hosts.txt"); }),
            "--hostfile hosts.txt line 2: 'h2 slot=2' is not 'host slots=N', 'host:N' or 'host' (slots 1 to 4096)");
  EXPECT_NE(inputErrorOf([] { parseHostfile("h1:2 slots=2\n", "f"); }).find("line 1"), std::string::npos);
  EXPECT_NE(inputErrorOf([] { parseHostfile("h1 slots=0\n", "f"); }).find("line 1"), std::string::npos);
  EXPECT_EQ(inputErrorOf([] { parseHostfile("# nothing\n\n", "f"); }), "--hostfile f: lists no host");
  EXPECT_NE(inputErrorOf([] { parseHostfile("h1\nh1 slots=2\n", "f"); }).find("'h1' is listed twice"),
            std::string::npos);
}

TEST(HostListTest, WorkersFillSlotsInOrderAndServersGoToTheLastHosts) {
  const std::vector<HostSlots> hosts{{"h1", 2}, {"h2", 2}, {"h3", 1}};
  const TaskHosts placed = placeTasks(hosts, 4, 2);
  EXPECT_EQ(placed.workers, (std::vector<std::string>{"h1", "h1", "h2", "h2"}));
  EXPECT_EQ(placed.servers, (std::vector<std::string>{"h3", "h2"}));
  // Workers count among the workers of their host; a server among every task there.
  EXPECT_EQ(placed.localRank(false, 0), (std::pair{0, 2}));
  EXPECT_EQ(placed.localRank(false, 3), (std::pair{1, 2}));
  EXPECT_EQ(placed.localRank(true, 0), (std::pair{0, 1}));
  EXPECT_EQ(placed.localRank(true, 1), (std::pair{2, 3}));
  // More servers than hosts go round again.
  EXPECT_EQ(placeTasks({{"a", 1}, {"b", 1}}, 1, 3).servers, (std::vector<std::string>{"b", "a", "b"}));
  EXPECT_EQ(inputErrorOf([&] { placeTasks(hosts, 6, 0); }),
            "--workers 6: the hosts have 5 slot(s) (h1:2,h2:2,h3:1); list more hosts or slots");
}

}  // namespace
}  // namespace tandem::launch
