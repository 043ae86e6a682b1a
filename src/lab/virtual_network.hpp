#pragma once
// Emulated hosts on this machine: one network namespace per host, each
// joined to a software switch (a bridge in the root namespace) by a veth
// link that `tc tbf` shapes to the link rate in both directions. The switch
// ports stay in the root namespace, so their interface counters give each
// host's link bytes without entering the namespaces. The bridge has no
// address and no other port: no traffic leaves the lab.
//
// Latency: this kernel has no netem, so links add none beyond the veth's
// own (tens of microseconds); the planner accounts for configured latency.
#include <cstdint>
#include <string>
#include <vector>

#include "lab/system_command.hpp"

namespace tandem::lab {

struct LinkShape {
  double bits_per_s = 1e9;  // each direction of each host's link
  int mtu = 9000;           // jumbo frames: header bytes stay under 1% of the wire
  // How long a packet may wait in a link's queue before it is dropped (a
  // switch port's buffer, in time at the link's rate).
  double queue_s = 0.1;
};

struct LinkCounters {
  uint64_t sent_bytes = 0;      // host -> switch (the switch port's rx)
  uint64_t received_bytes = 0;  // switch -> host (the switch port's tx)
};

struct LinkDrops {
  uint64_t sent_packets = 0;      // host -> switch, dropped at the host's end
  uint64_t received_packets = 0;  // switch -> host, dropped at the switch port
};

// Not thread-safe, except counters(), which only reads sysfs.
class VirtualNetwork {
 public:
  // Builds `hosts` hosts. `lab_id` names everything (namespaces
  // "tandem-lab-ID-hN", interfaces "tlIDhN"); the caller's pid by default,
  // which is how a later lab finds leftovers whose owner died. Throws Error
  // naming the failing command, after removing whatever was built.
  VirtualNetwork(int hosts, LinkShape shape, AdminTools tools, std::string lab_id = "");
  ~VirtualNetwork();  // removes the namespaces, links and bridge
  VirtualNetwork(const VirtualNetwork&) = delete;
  VirtualNetwork& operator=(const VirtualNetwork&) = delete;

  int hosts() const { return hosts_; }
  const std::string& namespaceName(int host) const { return namespaces_.at(static_cast<size_t>(host)); }
  std::string address(int host) const;  // "10.77.0.N", N = host + 1
  // A prefix that runs a command inside the host: ip netns exec NAME ...
  std::vector<std::string> execPrefix(int host) const;
  std::vector<LinkCounters> counters() const;
  // Packets each link's shaper dropped since the lab was built (its queue
  // was full), by host. Runs tc; throws Error if it cannot be read.
  std::vector<LinkDrops> droppedPackets() const;
  // Removes everything now (also done by the destructor); safe to repeat.
  void tearDown();

 private:
  std::string switchPort(int host) const;
  AdminTools tools_;
  int hosts_;
  std::string id_;
  std::string bridge_;
  std::vector<std::string> namespaces_;
  bool built_ = false;
};

// "" when this process may build a lab; else which capabilities it lacks
// and why they are needed.
std::string missingLabPrivileges();

// Removes labs whose owning process is gone (killed before it could clean
// up). Returns the number of namespaces removed.
int removeStaleLabs(const AdminTools& tools);

// The lab namespaces that exist now ("tandem-lab-..."), for tests and
// `tandem lab --cleanup`.
std::vector<std::string> labNamespaces(const AdminTools& tools);

}  // namespace tandem::lab
