#include "lab/link_timeline.hpp"

#include <fmt/format.h>

#include <cmath>

namespace tandem::lab {
namespace {

int64_t micros(double unix_s) { return std::llround(unix_s * 1e6); }

nlohmann::json counter(size_t host, double time, double sent_mbps, double received_mbps) {
  return {{"ph", "C"},
          {"name", fmt::format("host {} link", host)},
          {"pid", kLinkTimelinePid},
          {"ts", micros(time)},
          {"args", {{"sent", sent_mbps}, {"received", received_mbps}}}};
}

}  // namespace

nlohmann::json linkCounterEvents(const std::vector<CounterSample>& samples, double dilation) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", kLinkTimelinePid},
                    {"tid", 0},
                    {"args", {{"name", "lab links (emulated Mbit/s)"}}}});
  for (size_t i = 1; i < samples.size(); ++i) {
    const CounterSample& a = samples[i - 1];
    const CounterSample& b = samples[i];
    const double seconds = b.time - a.time;
    if (!(seconds > 0) || a.links.size() != b.links.size()) continue;
    // Counters only grow; a smaller one (a link rebuilt) reads as idle.
    auto mbps = [&](uint64_t from, uint64_t to) {
      return to > from ? static_cast<double>(to - from) * 8 / seconds / 1e6 * dilation : 0.0;
    };
    for (size_t h = 0; h < a.links.size(); ++h) {
      events.push_back(counter(h, a.time, mbps(a.links[h].sent_bytes, b.links[h].sent_bytes),
                               mbps(a.links[h].received_bytes, b.links[h].received_bytes)));
    }
  }
  if (samples.size() > 1) {
    for (size_t h = 0; h < samples.back().links.size(); ++h) events.push_back(counter(h, samples.back().time, 0, 0));
  }
  return events;
}

}  // namespace tandem::lab
