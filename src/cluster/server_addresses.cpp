#include "cluster/server_addresses.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cluster/membership.hpp"
#include "core/error.hpp"

namespace tandem::cluster {
namespace {

std::string addressKey(int server) { return fmt::format("hosts/ps/{}", server); }

}  // namespace

void publishServerAddress(CoordinatorClient& store, int server, const HostPort& address, Deadline deadline) {
  const std::string text = address.str();
  store.set(addressKey(server), std::vector<char>(text.begin(), text.end()), deadline);
}

std::vector<HostPort> readServerAddresses(CoordinatorClient& store, int servers, Deadline deadline) {
  std::vector<std::string> keys;
  for (int i = 0; i < servers; ++i) keys.push_back(addressKey(i));
  if (const auto missing = awaitKeys(store, keys, deadline); !missing.empty()) {
    std::vector<std::string> names;
    for (const auto& k : missing) names.push_back(fmt::format("ps {}", k.substr(k.rfind('/') + 1)));
    if (!deadline.expired()) {
      throw Interrupted(fmt::format("stopped by a signal while waiting for the servers' addresses: none yet from {}",
                                    fmt::join(names, ", ")));
    }
    throw PeerError(fmt::format("{} published no address in the coordinator's store within the deadline "
                                "(--rendezvous-timeout): did every task of the step start, and the servers bind?",
                                fmt::join(names, ", ")));
  }
  std::vector<HostPort> addresses;
  for (int i = 0; i < servers; ++i) {
    const auto value = store.tryGet(keys[static_cast<size_t>(i)]);
    if (!value) throw PeerError(fmt::format("{} vanished from the coordinator's store", keys[static_cast<size_t>(i)]));
    addresses.push_back(parseHostPort(std::string(value->begin(), value->end()), fmt::format("ps {}'s address", i)));
  }
  return addresses;
}

}  // namespace tandem::cluster
