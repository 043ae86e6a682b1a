#pragma once
// A TCP forwarder that can fall silent: a host that stopped answering,
// its connections open and nothing passing, for the heartbeat's tests.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "net/frame.hpp"

namespace tandem::testing {

// Forwards one TCP connection to `target_port` until frozen; then keeps
// both ends open and passes nothing, like a host that stopped answering.
class FreezableProxy {
 public:
  explicit FreezableProxy(int target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listener_, 4) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("proxy: cannot listen");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~FreezableProxy() {
    stop_ = true;
    thread_.join();
    for (int fd : {listener_, client_, server_}) {
      if (fd >= 0) ::close(fd);
    }
  }
  std::string endpoint() const { return net::tcpEndpoint("127.0.0.1", port_); }
  void freeze() { frozen_ = true; }

 private:
  void run() {
    pollfd accept_poll{listener_, POLLIN, 0};
    while (!stop_ && ::poll(&accept_poll, 1, 20) <= 0) {
    }
    if (stop_) return;
    client_ = ::accept(listener_, nullptr, nullptr);
    server_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (::connect(server_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    char buffer[65536];
    while (!stop_) {
      if (frozen_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      pollfd fds[2] = {{client_, POLLIN, 0}, {server_, POLLIN, 0}};
      if (::poll(fds, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
        if (n <= 0) return;
        if (::write(fds[1 - i].fd, buffer, static_cast<size_t>(n)) != n) return;
      }
    }
  }

  int target_port_;
  int port_ = 0;
  int listener_ = -1, client_ = -1, server_ = -1;
  std::atomic<bool> stop_{false}, frozen_{false};
  std::thread thread_;
};

}  // namespace tandem::testing
