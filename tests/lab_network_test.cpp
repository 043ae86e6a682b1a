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

const AdminTools& tools() {
  static const AdminTools found = findAdminTools(captureEnvironment());
  return found;
}

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
    for (const auto& name : labNamespaces(tools())) n += name.rfind("tandem-lab-" + id + "-", 0) == 0;
    return n;
  };
  constexpr size_t kBytes = 3'000'000;
  double seconds = 0;
  size_t received = 0;
  {
    VirtualNetwork net(2, {100e6}, tools(), id);
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

// The queue a link keeps is the shape's, in time at its rate, in both
// directions (tbf's "lat"), and a queue of no time at all is refused.
TEST(LabNetwork, EachLinkQueuesAsLongAsTheShapeSays) {
  if (!missingLabPrivileges().empty()) GTEST_SKIP() << missingLabPrivileges();
  const std::string id = "q" + std::to_string(::getpid() % 100000);
  VirtualNetwork net(1, {.bits_per_s = 20e6, .queue_s = 0.35}, tools(), id);
  const auto show = [](const std::string& command) {
    std::string out;
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    char buffer[512];
    while (pipe != nullptr && std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
    if (pipe != nullptr) ::pclose(pipe);
    return out;
  };
  const std::string up = show("tc -n " + net.namespaceName(0) + " qdisc show dev eth0");
  EXPECT_NE(up.find("rate 20Mbit"), std::string::npos) << up;
  EXPECT_NE(up.find("lat 350ms"), std::string::npos) << up;
  const std::string down = show("tc qdisc show dev tl" + id + "h0");
  EXPECT_NE(down.find("lat 350ms"), std::string::npos) << down;
  EXPECT_THROW(VirtualNetwork(1, {.bits_per_s = 20e6, .queue_s = 0}, tools(), id + "z"), InputError);
}

// A burst beyond a link's queue is dropped at the sender's end, and the lab
// counts it there, not on the link that stayed idle.
TEST(LabNetwork, PacketsBeyondTheQueueAreCountedAsDrops) {
  if (!missingLabPrivileges().empty()) GTEST_SKIP() << missingLabPrivileges();
  const std::string id = "d" + std::to_string(::getpid() % 100000);
  VirtualNetwork net(2, {.bits_per_s = 1e6, .queue_s = 0.01}, tools(), id);
  for (const auto& d : net.droppedPackets()) {
    EXPECT_EQ(d.sent_packets, 0u);
    EXPECT_EQ(d.received_packets, 0u);
  }
  std::thread sender([&] {
    enter(net, 0);
    const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in to = endpoint(net, 1, 5051);  // nobody listens: the bytes only need to leave
    std::vector<char> datagram(1000, 'x');
    // 200 KB at once: 1.6 s of a 1 Mbit/s link, whose queue holds 10 ms.
    for (int i = 0; i < 200; ++i) {
      ::sendto(s, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
    }
    ::close(s);
  });
  sender.join();
  const auto drops = net.droppedPackets();
  ASSERT_EQ(drops.size(), 2u);
  EXPECT_GT(drops[0].sent_packets, 100u);
  EXPECT_EQ(drops[1].sent_packets, 0u);
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
  [[maybe_unused]] static VirtualNetwork* leaked = nullptr;
  leaked = new VirtualNetwork(1, {1e9}, tools(), std::to_string(child));
  const auto names = labNamespaces(tools());
  ASSERT_NE(std::find(names.begin(), names.end(), "tandem-lab-" + std::to_string(child) + "-h0"), names.end());
  EXPECT_GE(removeStaleLabs(tools()), 1);
  const auto after = labNamespaces(tools());
  EXPECT_EQ(std::find(after.begin(), after.end(), "tandem-lab-" + std::to_string(child) + "-h0"), after.end());
}

}  // namespace
}  // namespace tandem::lab
