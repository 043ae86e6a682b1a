#include "launch/host_list.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "core/error.hpp"

namespace tandem::launch {
namespace {

std::string_view trimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::optional<int> slotCount(std::string_view digits) {
  int parsed = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
  if (error != std::errc() || end != digits.data() + digits.size() || parsed < 1 || parsed > kMaxSlots) {
    return std::nullopt;
  }
  return parsed;
}

// No blanks, commas or brackets inside a name: a typo rather than a host.
bool plausibleHost(std::string_view host) {
  return !host.empty() && host.find_first_of(" \t,[]") == std::string_view::npos;
}

void requireUnique(const std::vector<HostSlots>& hosts, const std::string& where) {
  std::set<std::string> seen;
  for (const auto& h : hosts) {
    if (!seen.insert(h.host).second) {
      throw InputError(fmt::format("{}: host '{}' is listed twice; give it once with all its slots", where, h.host));
    }
  }
}

}  // namespace

std::optional<HostSlots> parseHostSlots(std::string_view entry) {
  entry = trimBlanks(entry);
  HostSlots parsed;
  std::string_view host = entry;
  std::string_view slots;  // after the colon, if any
  if (entry.starts_with('[')) {  // "[v6]" or "[v6]:slots": the address has colons of its own
    const size_t close = entry.find(']');
    if (close == std::string_view::npos || close < 2) return std::nullopt;
    host = entry.substr(1, close - 1);
    const std::string_view rest = entry.substr(close + 1);
    if (!rest.empty() && !rest.starts_with(':')) return std::nullopt;
    if (!rest.empty()) slots = rest.substr(1);
    if (!rest.empty() && slots.empty()) return std::nullopt;
  } else {
    const size_t colon = entry.find(':');
    if (colon != std::string_view::npos) {
      host = trimBlanks(entry.substr(0, colon));
      slots = entry.substr(colon + 1);
      if (slots.empty()) return std::nullopt;
    }
    if (!plausibleHost(host)) return std::nullopt;
  }
  if (!slots.empty()) {
    const auto count = slotCount(trimBlanks(slots));  // a bare IPv6 address fails here
    if (!count) return std::nullopt;
    parsed.slots = *count;
  }
  parsed.host = std::string(host);
  return parsed;
}

std::vector<HostSlots> parseHostList(std::string_view text) {
  std::vector<HostSlots> hosts;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    const auto parsed = parseHostSlots(entry);
    if (!parsed) {
      throw InputError(fmt::format("--hosts '{}': entry '{}' is not host or host:slots (slots 1 to {}; an IPv6 "
                                   "address in brackets)",
                                   text, trimBlanks(entry), kMaxSlots));
    }
    hosts.push_back(*parsed);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  requireUnique(hosts, fmt::format("--hosts '{}'", text));
  return hosts;
}

std::vector<HostSlots> parseHostfile(std::string_view content, const std::string& file) {
  std::vector<HostSlots> hosts;
  int number = 0;
  while (!content.empty()) {
    const size_t end = content.find('\n');
    std::string_view line = content.substr(0, end);
    content.remove_prefix(end == std::string_view::npos ? content.size() : end + 1);
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trimBlanks(line);
    if (line.empty()) continue;
    auto bad = [&] {
      return InputError(fmt::format("--hostfile {} line {}: '{}' is not 'host slots=N', 'host:N' or 'host' (slots 1 "
                                    "to {})",
                                    file, number, line, kMaxSlots));
    };
    std::optional<HostSlots> parsed;
    if (const size_t blank = line.find_first_of(" \t"); blank != std::string_view::npos) {
      const std::string_view tail = trimBlanks(line.substr(blank));
      const auto count = tail.starts_with("slots=") ? slotCount(tail.substr(6)) : std::nullopt;
      const std::string_view word = line.substr(0, blank);
      // Slots once: "h1:2 slots=2" says it twice.
      const bool slots_in_word = word.find(word.starts_with('[') ? "]:" : ":") != std::string_view::npos;
      parsed = parseHostSlots(word);
      if (!count || !parsed || slots_in_word) throw bad();
      parsed->slots = *count;
    } else {
      parsed = parseHostSlots(line);
      if (!parsed) throw bad();
    }
    hosts.push_back(*parsed);
  }
  if (hosts.empty()) throw InputError(fmt::format("--hostfile {}: lists no host", file));
  requireUnique(hosts, fmt::format("--hostfile {}", file));
  return hosts;
}

TaskHosts placeTasks(const std::vector<HostSlots>& hosts, int workers, int servers) {
  int slots = 0;
  std::string listed;
  for (const auto& h : hosts) {
    slots += h.slots;
    listed += fmt::format("{}{}:{}", listed.empty() ? "" : ",", h.host, h.slots);
  }
  if (workers > slots) {
    throw InputError(fmt::format("--workers {}: the hosts have {} slot(s) ({}); list more hosts or slots", workers,
                                 slots, listed));
  }
  TaskHosts placed;
  for (const auto& h : hosts) {
    for (int s = 0; s < h.slots && static_cast<int>(placed.workers.size()) < workers; ++s) {
      placed.workers.push_back(h.host);
    }
  }
  for (int i = 0; i < servers; ++i) {
    placed.servers.push_back(hosts[hosts.size() - 1 - static_cast<size_t>(i) % hosts.size()].host);
  }
  return placed;
}

std::pair<int, int> TaskHosts::localRank(bool server, int index) const {
  const std::string& host = (server ? servers : workers).at(static_cast<size_t>(index));
  const auto here = [&host](const std::vector<std::string>& tasks, size_t before) {
    return static_cast<int>(std::count(tasks.begin(), tasks.begin() + static_cast<std::ptrdiff_t>(before), host));
  };
  const int workers_here = here(workers, workers.size());
  if (!server) return {here(workers, static_cast<size_t>(index)), workers_here};
  return {workers_here + here(servers, static_cast<size_t>(index)), workers_here + here(servers, servers.size())};
}

}  // namespace tandem::launch
