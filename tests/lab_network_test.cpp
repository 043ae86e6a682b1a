// The lab's network: real namespaces, veth links and tbf shaping (needs root,
// as `tandem lab` does; skipped without it). Bytes cross a link from a thread
// that entered one host's namespace to a thread in another's.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "lab/virtual_network.hpp"

namespace tandem::lab {
namespace {

// Moves the calling thread into the host's network namespace.
void enter(const VirtualNetwork& net, int host) {
  const int fd = ::open(("/run/netns/" + net.namespaceName(host)).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::setns(fd, CLONE_NEWNET), 0);
  ::close(fd);
}

sockaddr_in endpoint(const VirtualNetwork& net, int host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, net.address(host).c_str(), &addr.sin_addr);
  return addr;
}

TEST(LabNetwork, ShapesEachLinkCountsItsBytesAndLeavesNothingBehind) {
  if (!missingLabPrivileges().empty()) GTEST_SKIP() << missingLabPrivileges();
  const std::string id = "t" + std::to_string(::getpid() % 100000);
  auto mine = [&id] {
    size_t n = 0;
    for (const auto& name : labNamespaces()) n += name.rfind("tandem-lab-" + id + "-", 0) == 0;
    return n;
  };
  constexpr size_t kBytes = 3'000'000;
  double seconds = 0;
  size_t received = 0;
  {
    VirtualNetwork net(2, {100e6}, id);
    EXPECT_EQ(mine(), 2u);
    const auto start = net.counters();
    std::thread server([&] {
      enter(net, 1);
      const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr = endpoint(net, 1, 5050);
      ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
      ::listen(listener, 1);
      const int conn = ::accept(listener, nullptr, nullptr);
      std::vector<char> buffer(1 << 16);
      for (ssize_t n; (n = ::read(conn, buffer.data(), buffer.size())) > 0;) received += static_cast<size_t>(n);
      ::close(conn);
      ::close(listener);
    });
    std::thread client([&] {
      enter(net, 0);
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr = endpoint(net, 1, 5050);
      for (int attempt = 0; ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && attempt < 100; ++attempt) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::vector<char> data(kBytes, 'x');
      const auto t0 = std::chrono::steady_clock::now();
      size_t sent = 0;
      while (sent < data.size()) {
        const ssize_t n = ::write(s, data.data() + sent, data.size() - sent);
        ASSERT_GT(n, 0);
        sent += static_cast<size_t>(n);
      }
      ::shutdown(s, SHUT_WR);
      char byte;
      (void)::read(s, &byte, 1);  // the server's close: everything has arrived
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ::close(s);
    });
    client.join();
    server.join();
    const auto end = net.counters();
    EXPECT_EQ(received, kBytes);
    // 3 MB at 100 Mbit/s: 0.24 s.
    EXPECT_NEAR(kBytes * 8 / seconds / 1e6, 100, 8) << seconds << " s";
    // Host 0 sent the payload plus under 1% of headers (9000-byte frames).
    const double sent = static_cast<double>(end[0].sent_bytes - start[0].sent_bytes);
    EXPECT_GE(sent, kBytes);
    EXPECT_LT(sent, kBytes * 1.01);
    // What host 0 sent is what host 1 received, but for a frame or two still
    // queued in the switch port's shaper when the counters were read.
    EXPECT_NEAR(static_cast<double>(end[1].received_bytes - start[1].received_bytes), sent, 200);
  }
  EXPECT_EQ(mine(), 0u);
}

TEST(LabNetwork, StaleLabsOfADeadOwnerAreRemoved) {
  if (!missingLabPrivileges().empty()) GTEST_SKIP() << missingLabPrivileges();
  // A pid that is not running: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  // Never destroyed, as if its owner were killed; held by a static so that
  // LeakSanitizer knows it is meant.
  static VirtualNetwork* leaked = nullptr;
  leaked = new VirtualNetwork(1, {1e9}, std::to_string(child));
  const auto names = labNamespaces();
  ASSERT_NE(std::find(names.begin(), names.end(), "tandem-lab-" + std::to_string(child) + "-h0"), names.end());
  EXPECT_GE(removeStaleLabs(), 1);
  const auto after = labNamespaces();
  EXPECT_EQ(std::find(after.begin(), after.end(), "tandem-lab-" + std::to_string(child) + "-h0"), after.end());
}

}  // namespace
}  // namespace tandem::lab
