// Which interfaces a task's ports listen on: a host name binds the address
// it names on this machine, never every interface, unless --bind asks for
// it (issue 14, "bind where you mean"). Read from /proc/net/tcp, as `ss`
// would show them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {

using testing::readFile;
using testing::TempDir;

// The local address (hex, as /proc/net/tcp writes it) listening on `port`,
// or "" if none yet.
std::string listeningOn(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const auto colon = local.find(':');
    if (state == "0A" && std::stoi(local.substr(colon + 1), nullptr, 16) == port) return local.substr(0, colon);
  }
  return "";
}

std::string awaitListening(int port, pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    if (auto address = listeningOn(port); !address.empty()) return address;
    if (::kill(pid, 0) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

// A PS waiting for its chief and a chief waiting for its workers have no
// job to finish: SIGTERM stops them at once (exit 130), not after the
// rendezvous or startup timeout (60 and 90 s here).
void stop(pid_t pid, const std::filesystem::path& log) {
  ::kill(pid, SIGTERM);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(testing::waitForExit(pid, std::chrono::seconds(20)), 130) << readFile(log);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3)) << readFile(log);
  EXPECT_NE(readFile(log).find("stopped by a signal"), std::string::npos) << readFile(log);
}

constexpr const char* kLoopback = "0100007F";  // 127.0.0.1
constexpr const char* kEveryInterface = "00000000";

// A PS and a coordinator (worker 0) named "localhost": both listen on
// 127.0.0.1 only. Each waits for the rest of its job, which never comes.
TEST(CliBind, AHostNameListensOnTheAddressItNamesNotOnEveryInterface) {
  TempDir dir;
  const int ps = testing::freePort(), w0 = testing::freePort(), w1 = testing::freePort();
  const std::string cluster =
      fmt::format("--ps-hosts localhost:{} --worker-hosts localhost:{},localhost:{}", ps, w0, w1);
  const pid_t server = testing::spawnTandem("train --max-steps 1 " + cluster + " --job-name ps --task-index 0",
                                            dir.str("ps.log"));
  const pid_t chief = testing::spawnTandem(
      "train --max-steps 1 --out " + dir.str("out") + " " + cluster + " --job-name worker --task-index 0",
      dir.str("w0.log"));
  EXPECT_EQ(awaitListening(ps, server), kLoopback) << readFile(dir.path() / "ps.log");
  EXPECT_EQ(awaitListening(w0, chief), kLoopback) << readFile(dir.path() / "w0.log");
  stop(chief, dir.path() / "w0.log");
  stop(server, dir.path() / "ps.log");
}

TEST(CliBind, BindZeroListensOnEveryInterfaceAndSaysSo) {
  TempDir dir;
  const int ps = testing::freePort(), w0 = testing::freePort();
  const pid_t server = testing::spawnTandem(
      fmt::format("train --max-steps 1 --ps-hosts localhost:{} --worker-hosts localhost:{} --job-name ps "
                  "--task-index 0 --bind 0.0.0.0",
                  ps, w0),
      dir.str("ps.log"));
  EXPECT_EQ(awaitListening(ps, server), kEveryInterface) << readFile(dir.path() / "ps.log");
  EXPECT_NE(readFile(dir.path() / "ps.log").find("listen on every interface"), std::string::npos)
      << readFile(dir.path() / "ps.log");
  stop(server, dir.path() / "ps.log");
}

}  // namespace
}  // namespace tandem
