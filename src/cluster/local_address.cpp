#include "cluster/local_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "core/error.hpp"

namespace tandem::cluster {

std::string localAddressToward(const HostPort& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  std::string port = std::to_string(peer.port);
  if (int rc = ::getaddrinfo(peer.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw Error(fmt::format("cannot resolve {}: {}", peer.str(), ::gai_strerror(rc)));
  }
  std::string result;
  for (addrinfo* a = found; a != nullptr && result.empty(); a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr = local.ss_family == AF_INET
                             ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (::inet_ntop(local.ss_family, addr, text, sizeof(text)) != nullptr) result = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (result.empty()) throw Error(fmt::format("no local route to {}", peer.str()));
  return result;
}

std::string bindableAddress(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, host.c_str(), buffer) == 1) return host;
  if (::inet_pton(AF_INET6, host.c_str(), buffer) == 1) return host;
  return "*";
}

void requireResolvableHosts(const ClusterSpec& spec) {
  auto check = [](const std::string& host, const std::string& where) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
      throw InputError(fmt::format("{}: host '{}' does not resolve ({})", where, host, ::gai_strerror(rc)));
    }
    ::freeaddrinfo(found);
  };
  const bool tf = spec.source == "TF_CONFIG";
  for (size_t i = 0; i < spec.worker_hosts.size(); ++i) {
    check(spec.worker_hosts[i].host, tf ? fmt::format("TF_CONFIG cluster (worker rank {})", i) : "--worker_hosts");
  }
  for (size_t i = 0; i < spec.ps_hosts.size(); ++i) {
    check(spec.ps_hosts[i].host, tf ? fmt::format("TF_CONFIG cluster.ps[{}]", i) : "--ps_hosts");
  }
  const bool listed = !spec.worker_hosts.empty() && spec.coordinator == spec.worker_hosts.front();
  if (!listed) {
    check(spec.coordinator.host, spec.source == "torchrun" ? "--coordinator or MASTER_ADDR" : "--coordinator");
  }
}

}  // namespace tandem::cluster
