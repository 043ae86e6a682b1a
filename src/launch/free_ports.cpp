#include "launch/free_ports.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/error.hpp"

namespace tandem::launch {

std::vector<int> pickFreePorts(const std::string& host, int count) {
  std::string name = host;
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(name.c_str(), "0", &hints, &found);
  if (rc != 0) throw InputError(fmt::format("cannot pick a free port: host '{}' does not resolve: {}", host, gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, &::freeaddrinfo);
  // Every socket stays bound until all are picked: the kernel hands a port
  // just closed out again, and a job with two tasks on one port fails.
  std::vector<int> fds, ports;
  auto closeAll = [&fds] {
    for (int fd : fds) ::close(fd);
  };
  std::string last_error = "no address";
  while (static_cast<int>(ports.size()) < count) {
    int port = -1;
    for (addrinfo* ai = found; ai != nullptr && port < 0; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        last_error = std::strerror(errno);
        continue;
      }
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
        last_error = std::strerror(errno);
        ::close(fd);
        continue;
      }
      fds.push_back(fd);
      port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
    if (port < 0) {
      closeAll();
      throw Error(fmt::format("cannot pick a free port on {}: {}", host, last_error));
    }
    ports.push_back(port);
  }
  closeAll();
  return ports;
}

int pickFreePort(const std::string& host) { return pickFreePorts(host, 1).front(); }

}  // namespace tandem::launch
