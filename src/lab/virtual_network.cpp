#include "lab/virtual_network.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "lab/system_command.hpp"

namespace tandem::lab {
namespace {

constexpr const char* kNamespacePrefix = "tandem-lab-";

uint64_t readCounter(const std::string& interface, const char* name) {
  std::ifstream in(fmt::format("/sys/class/net/{}/statistics/{}", interface, name));
  uint64_t value = 0;
  if (!(in >> value)) throw Error(fmt::format("cannot read the {} counter of lab link {}", name, interface));
  return value;
}

// tbf needs a bucket of at least one frame; beyond that a small bucket keeps
// idle time from buying free bursts (a real link has none). 0.1 ms of rate
// keeps fast links accurate (1 Gbit/s measured 991 Mbit/s with 18 KB).
std::string tbfArgs(const LinkShape& shape) {
  const double burst = std::max(2.0 * (shape.mtu + 64), shape.bits_per_s / 8 * 1e-4);
  return fmt::format("rate {}bit burst {} latency {}us", static_cast<uint64_t>(std::llround(shape.bits_per_s)),
                     static_cast<uint64_t>(burst), static_cast<uint64_t>(std::llround(shape.queue_s * 1e6)));
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

void runQuietly(const std::vector<std::string>& argv) { (void)runCommand(argv); }

// IPv6 would have every interface send router solicitations and multicast
// reports on its own: bytes on the counters that no task sent.
void disableIpv6(const std::string& ip, const std::string& interface, const std::string& netns = "") {
  const std::string knob = fmt::format("/proc/sys/net/ipv6/conf/{}/disable_ipv6", interface);
  if (netns.empty()) {
    std::ofstream(knob) << "1\n";
  } else {
    runChecked({ip, "netns", "exec", netns, "sh", "-c", "echo 1 > " + knob});
  }
}

}  // namespace

VirtualNetwork::VirtualNetwork(int hosts, LinkShape shape, AdminTools tools, std::string lab_id)
    : tools_(std::move(tools)),
      hosts_(hosts), id_(lab_id.empty() ? std::to_string(::getpid()) : std::move(lab_id)) {
  if (hosts < 1 || hosts > 250) throw InputError(fmt::format("--hosts: a lab holds 1 to 250 hosts, got {}", hosts));
  if (!(shape.bits_per_s >= 1e5)) {
    throw InputError(fmt::format("--link-mbps: the link rate must be at least 0.1 Mbit/s, got {} bit/s",
                                 shape.bits_per_s));
  }
  if (!(shape.queue_s >= 1e-3 && shape.queue_s <= 3600)) {
    throw InputError(fmt::format("lab link queue of {} s: must be 1 ms to an hour", shape.queue_s));
  }
  bridge_ = fmt::format("tl{}br", id_);
  if (bridge_.size() > 15) throw InputError(fmt::format("lab id '{}' is too long for interface names", id_));
  for (int h = 0; h < hosts; ++h) namespaces_.push_back(fmt::format("{}{}-h{}", kNamespacePrefix, id_, h));
  built_ = true;
  try {
    runChecked({tools_.ip, "link", "add", bridge_, "type", "bridge"});
    disableIpv6(tools_.ip, bridge_);
    runChecked({tools_.ip, "link", "set", bridge_, "up"});
    const std::string mtu = std::to_string(shape.mtu);
    const std::vector<std::string> tbf = words(tbfArgs(shape));
    for (int h = 0; h < hosts; ++h) {
      const std::string& ns = namespaces_[static_cast<size_t>(h)];
      const std::string port = switchPort(h);
      runChecked({tools_.ip, "netns", "add", ns});
      runChecked({tools_.ip, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns});
      disableIpv6(tools_.ip, port);
      disableIpv6(tools_.ip, "all", ns);
      runChecked({tools_.ip, "link", "set", port, "mtu", mtu, "master", bridge_, "up"});
      runChecked({tools_.ip, "-n", ns, "link", "set", "lo", "up"});
      runChecked({tools_.ip, "-n", ns, "link", "set", "eth0", "mtu", mtu, "up"});
      runChecked({tools_.ip, "-n", ns, "addr", "add", address(h) + "/24", "dev", "eth0"});
      std::vector<std::string> up = {tools_.tc, "-n", ns, "qdisc", "add", "dev", "eth0", "root", "tbf"};
      std::vector<std::string> down = {tools_.tc, "qdisc", "add", "dev", port, "root", "tbf"};
      up.insert(up.end(), tbf.begin(), tbf.end());
      down.insert(down.end(), tbf.begin(), tbf.end());
      runChecked(up);
      runChecked(down);
    }
  } catch (...) {
    tearDown();
    throw;
  }
}

VirtualNetwork::~VirtualNetwork() { tearDown(); }

void VirtualNetwork::tearDown() {
  if (!built_) return;
  built_ = false;
  // Deleting a namespace deletes its veth end, and with it the switch port.
  for (int h = 0; h < hosts_; ++h) {
    runQuietly({tools_.ip, "netns", "del", namespaces_[static_cast<size_t>(h)]});
    runQuietly({tools_.ip, "link", "del", switchPort(h)});
  }
  runQuietly({tools_.ip, "link", "del", bridge_});
}

std::string VirtualNetwork::address(int host) const { return fmt::format("10.77.0.{}", host + 1); }

std::string VirtualNetwork::switchPort(int host) const { return fmt::format("tl{}h{}", id_, host); }

std::vector<std::string> VirtualNetwork::execPrefix(int host) const {
  return {tools_.ip, "netns", "exec", namespaceName(host)};
}

std::vector<LinkCounters> VirtualNetwork::counters() const {
  std::vector<LinkCounters> out;
  for (int h = 0; h < hosts_; ++h) {
    const std::string port = switchPort(h);
    out.push_back({readCounter(port, "rx_bytes"), readCounter(port, "tx_bytes")});
  }
  return out;
}

namespace {

uint64_t qdiscDrops(std::vector<std::string> argv) {
  const CommandResult r = runCommand(argv);
  try {
    if (r.exit_code != 0) throw Error("exit code " + std::to_string(r.exit_code));
    uint64_t drops = 0;
    for (const auto& qdisc : nlohmann::json::parse(r.output)) drops += qdisc.value("drops", uint64_t{0});
    return drops;
  } catch (const std::exception& e) {
    throw Error(fmt::format("cannot read the lab link's drops with '{}': {}: {}", commandLine(argv), e.what(),
                            r.output));
  }
}

}  // namespace

std::vector<LinkDrops> VirtualNetwork::droppedPackets() const {
  std::vector<LinkDrops> out;
  const std::string& tc = tools_.tc;
  for (int h = 0; h < hosts_; ++h) {
    // The host's own end shapes what it sends; the switch port what it receives.
    out.push_back({qdiscDrops({tc, "-s", "-j", "-n", namespaceName(h), "qdisc", "show", "dev", "eth0"}),
                   qdiscDrops({tc, "-s", "-j", "qdisc", "show", "dev", switchPort(h)})});
  }
  return out;
}

std::string missingLabPrivileges() {
  std::ifstream status("/proc/self/status");
  uint64_t effective = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("CapEff:", 0) == 0) effective = std::stoull(line.substr(7), nullptr, 16);
  }
  std::vector<std::string> missing;
  if ((effective & (1ull << 12)) == 0) missing.push_back("CAP_NET_ADMIN (veth links, the bridge, tc shaping)");
  if ((effective & (1ull << 21)) == 0) missing.push_back("CAP_SYS_ADMIN (network namespaces)");
  if (missing.empty()) return "";
  std::string text = "tandem lab needs ";
  for (size_t i = 0; i < missing.size(); ++i) text += (i > 0 ? " and " : "") + missing[i];
  return text + "; run it as root (e.g. sudo)";
}

std::vector<std::string> labNamespaces(const AdminTools& tools) {
  std::vector<std::string> out;
  const CommandResult r = runCommand({tools.ip, "netns", "list"});
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind(kNamespacePrefix, 0) == 0) out.push_back(name);
  }
  return out;
}

int removeStaleLabs(const AdminTools& tools) {
  static const std::regex kName(R"(tandem-lab-(\d+)-h(\d+))");
  int removed = 0;
  std::set<std::string> dead_ids;
  for (const auto& name : labNamespaces(tools)) {
    std::smatch m;
    if (!std::regex_match(name, m, kName)) continue;
    const pid_t owner = static_cast<pid_t>(std::stol(m[1]));
    if (owner == ::getpid() || ::kill(owner, 0) == 0 || errno == EPERM) continue;
    runQuietly({tools.ip, "netns", "del", name});
    runQuietly({tools.ip, "link", "del", fmt::format("tl{}h{}", m[1].str(), m[2].str())});
    dead_ids.insert(m[1]);
    ++removed;
  }
  for (const auto& id : dead_ids) runQuietly({tools.ip, "link", "del", fmt::format("tl{}br", id)});
  return removed;
}

}  // namespace tandem::lab
