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

std::string ownWorkerHost(const ClusterSpec& spec) {
  if (spec.worker_hosts.empty() && !spec.own_host.empty()) return spec.own_host;
  if (spec.worker_hosts.empty() || spec.beyondList()) return localAddressToward(spec.coordinator);
  return spec.worker_hosts.at(static_cast<size_t>(spec.index)).host;
}

namespace {

// Whether `address` (of `family`) belongs to this machine: binding it works.
bool isLocalAddress(const sockaddr* address, socklen_t length) {
  const int fd = ::socket(address->sa_family, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_storage any_port{};
  std::memcpy(&any_port, address, length);
  if (any_port.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&any_port)->sin_port = 0;
  if (any_port.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&any_port)->sin6_port = 0;
  const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&any_port), length) == 0;
  ::close(fd);
  return bound;
}

std::string addressText(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = address->sa_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(address)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  return ::inet_ntop(address->sa_family, raw, text, sizeof(text)) != nullptr ? text : "?";
}

}  // namespace

std::string bindableAddress(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  if (host == "*") return host;
  if (::inet_pton(AF_INET, host.c_str(), buffer) == 1) return host;
  if (::inet_pton(AF_INET6, host.c_str(), buffer) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
    throw InputError(fmt::format("cannot listen on host '{}': it does not resolve ({})", host, ::gai_strerror(rc)));
  }
  // IPv4 first: peers reach a name through ZeroMQ and Gloo over IPv4.
  std::string local, seen;
  for (int family : {AF_INET, AF_INET6}) {
    for (addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
      if (a->ai_family != family) continue;
      const std::string text = addressText(a->ai_addr);
      seen += (seen.empty() ? "" : ", ") + text;
      if (isLocalAddress(a->ai_addr, a->ai_addrlen)) local = text;
    }
  }
  ::freeaddrinfo(found);
  if (local.empty()) {
    throw InputError(fmt::format("cannot listen on host '{}': it resolves to {}, not an address of this machine; "
                                 "pass --bind ADDRESS (--bind 0.0.0.0 for every interface)",
                                 host, seen));
  }
  return local;
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
    if (spec.servers_published) {
      // Only this server's own host is known here; the others publish theirs once bound.
      if (!spec.ps_hosts[i].host.empty()) {
        check(spec.ps_hosts[i].host, "this server's host name (SLURMD_NODENAME, else the system's)");
      }
      continue;
    }
    check(spec.ps_hosts[i].host, tf ? fmt::format("TF_CONFIG cluster.ps[{}]", i) : "--ps_hosts");
  }
  const bool listed = !spec.worker_hosts.empty() && spec.coordinator == spec.worker_hosts.front();
  if (!listed) {
    check(spec.coordinator.host, spec.source == "torchrun" ? "--coordinator or MASTER_ADDR" : "--coordinator");
  }
}

}  // namespace tandem::cluster
