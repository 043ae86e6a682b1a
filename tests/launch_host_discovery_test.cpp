// Horovod-style host discovery for a growing job: the script's output
// parsed, the workers chosen to fill its slots, and a real script run,
// failing and hanging.
#include "launch/host_discovery.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "support/process.hpp"

namespace tandem::launch {
namespace {

const std::set<std::string> kLocal{"localhost", "127.0.0.1", "box"};

TEST(HostDiscoveryTest, CountsTheSlotsOfThisMachinesNamesOnly) {
  const DiscoveredHosts hosts = parseDiscoveredHosts("localhost:2\n# spare\n\n box \nnode7:4\n[::2]:3\n", kLocal);
  EXPECT_EQ(hosts.local_slots, 3);
  EXPECT_EQ(hosts.other_hosts, (std::vector<std::string>{"node7", "::2"}));
  // A host listed again keeps its last line, as a script that appends would mean.
  EXPECT_EQ(parseDiscoveredHosts("127.0.0.1:2\n127.0.0.1:5\n", kLocal).local_slots, 5);
  EXPECT_EQ(parseDiscoveredHosts("", kLocal).local_slots, 0);
}

TEST(HostDiscoveryTest, AMalformedLineIsNamedWithItsNumber) {
  for (const std::string bad : {"localhost:0", "localhost:x", "localhost:2x", ":3", "localhost:99999"}) {
    try {
      parseDiscoveredHosts("box:1\n" + bad + "\n", kLocal);
      ADD_FAILURE() << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("line 2 of the discovery script's output, '" + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(HostDiscoveryTest, FillsSlotsWithTheLowestFreeIdsUpToTheMaximum) {
  EXPECT_EQ(workersToStart({0, 1}, 4, 6), (std::vector<int>{2, 3}));
  EXPECT_EQ(workersToStart({0, 1}, 9, 3), (std::vector<int>{2}));
  // A dead worker's id is taken again before a new one.
  EXPECT_EQ(workersToStart({0, 2, 3}, 5, 5), (std::vector<int>{1, 4}));
  EXPECT_TRUE(workersToStart({0, 1, 2}, 2, 6).empty());
  EXPECT_TRUE(workersToStart({0, 1, 2}, 3, 6).empty());
}

std::string writeScript(const testing::TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.str(name);
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

TEST(HostDiscoveryTest, AsksTheHighestIdsToLeaveDownToTheSlotsButNotBelowTheMinimum) {
  EXPECT_EQ(workersToLeave({0, 1, 2, 3}, 2, 1), (std::vector<int>{3, 2}));
  EXPECT_EQ(workersToLeave({0, 1, 2, 3}, 1, 3), (std::vector<int>{3})) << "kept at --min-workers";
  EXPECT_EQ(workersToLeave({0, 2, 5}, 1, 1), (std::vector<int>{5, 2}));
  EXPECT_TRUE(workersToLeave({0, 1}, 2, 1).empty());
  EXPECT_TRUE(workersToLeave({0, 1}, 4, 1).empty());
  EXPECT_TRUE(workersToLeave({0, 1, 2}, 0, 3).empty());
}

TEST(HostDiscoveryTest, RunsTheScriptAndNamesItWhenItFailsOrHangs) {
  testing::TempDir dir;
  // The script sees the environment it is handed, not the test's own.
  const Environment env{{"PATH", "/usr/bin:/bin"}, {"FREE_SLOTS", "localhost:3"}};
  EXPECT_EQ(runDiscoveryScript(writeScript(dir, "ok", "echo \"$FREE_SLOTS\""), env, std::chrono::seconds(5)),
            "localhost:3\n");
  auto failure = [&env](const std::string& script, std::chrono::milliseconds timeout) {
    try {
      runDiscoveryScript(script, env, timeout);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string failing = writeScript(dir, "failing", "exit 3");
  EXPECT_EQ(failure(failing, std::chrono::seconds(5)), "discovery script " + failing + ": exited with status 3");
  const std::string hanging = writeScript(dir, "hanging", "exec sleep 60");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(failure(hanging, std::chrono::milliseconds(300)),
            "discovery script " + hanging + ": no answer within 300 ms; killed");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(failure(dir.str("missing"), std::chrono::seconds(1)).find("cannot start it"), std::string::npos);
}

}  // namespace
}  // namespace tandem::launch
