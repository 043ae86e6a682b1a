#include "cluster/server_addresses.hpp"

#include <fmt/format.h>

#include "cluster/membership.hpp"

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
  const std::vector<std::string> values =
      awaitPublished(store, keys, deadline, "waiting for the servers to publish where they listen (--ps)",
                     [](const std::string& k) { return fmt::format("ps {}", k.substr(k.rfind('/') + 1)); });
  std::vector<HostPort> addresses;
  for (int i = 0; i < servers; ++i) {
    addresses.push_back(parseHostPort(values[static_cast<size_t>(i)], fmt::format("ps {}'s address", i)));
  }
  return addresses;
}

}  // namespace tandem::cluster
