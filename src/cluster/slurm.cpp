#include "cluster/slurm.hpp"

#include <fmt/format.h>

#include <cctype>
#include <optional>

#include "core/error.hpp"

namespace tandem::cluster {
namespace {

// One piece of a host name: literal text, or a bracket's numbers, each
// already written out with its padding.
using Piece = std::vector<std::string>;

[[noreturn]] void bad(std::string_view field, std::string_view list, const std::string& why) {
  throw InputError(fmt::format("{}: host list '{}' does not parse: {}", field, list, why));
}

bool allDigits(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c)) == 0) return false;
  }
  return true;
}

// "01-04,07" (a bracket's inside) written out: 01 02 03 04 07.
Piece expandBracket(std::string_view inside, std::string_view field, std::string_view list) {
  Piece numbers;
  size_t start = 0;
  while (true) {
    const size_t comma = inside.find(',', start);
    const std::string_view item = inside.substr(start, comma == std::string_view::npos ? comma : comma - start);
    const size_t dash = item.find('-');
    const std::string_view lo = item.substr(0, dash);
    const std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (!allDigits(lo) || !allDigits(hi) || lo.size() > 9 || hi.size() > 9) {
      bad(field, list, fmt::format("'[{}]' holds '{}', not a number or a range a-b", inside, item));
    }
    const long first = std::stol(std::string(lo));
    const long last = std::stol(std::string(hi));
    if (last < first) bad(field, list, fmt::format("the range '{}' runs backwards", item));
    if (static_cast<size_t>(last - first) >= kMaxSlurmHosts) {
      bad(field, list, fmt::format("the range '{}' holds more than {} hosts", item, kMaxSlurmHosts));
    }
    for (long n = first; n <= last; ++n) numbers.push_back(fmt::format("{:0{}d}", n, lo.size()));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return numbers;
}

// One name with brackets ("r[1-2]n[01-02]") into `out`: every choice of
// each bracket, the last bracket changing fastest.
void expandName(std::string_view name, std::string_view field, std::string_view list, std::vector<std::string>& out) {
  std::vector<Piece> pieces;
  size_t i = 0;
  while (i < name.size()) {
    const size_t open = name.find('[', i);
    const size_t close_before = name.find(']', i);
    if (close_before < open) bad(field, list, fmt::format("'{}' closes a bracket it never opened", name));
    if (open == std::string_view::npos) {
      pieces.push_back({std::string(name.substr(i))});
      break;
    }
    if (open > i) pieces.push_back({std::string(name.substr(i, open - i))});
    const size_t close = name.find(']', open);
    if (close == std::string_view::npos) bad(field, list, fmt::format("'{}' opens a bracket it never closes", name));
    const std::string_view inside = name.substr(open + 1, close - open - 1);
    if (inside.find('[') != std::string_view::npos) bad(field, list, fmt::format("'{}' nests brackets", name));
    pieces.push_back(expandBracket(inside, field, list));
    i = close + 1;
  }
  size_t total = 1;
  for (const Piece& p : pieces) {
    total *= p.size();
    if (total + out.size() > kMaxSlurmHosts) bad(field, list, fmt::format("it names more than {} hosts", kMaxSlurmHosts));
  }
  std::vector<size_t> at(pieces.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    std::string host;
    for (size_t p = 0; p < pieces.size(); ++p) host += pieces[p][at[p]];
    out.push_back(std::move(host));
    for (size_t p = pieces.size(); p-- > 0;) {  // an odometer, the last piece fastest
      if (++at[p] < pieces[p].size()) break;
      at[p] = 0;
    }
  }
}

long long nonNegative(const Environment& env, std::string_view name) {
  const std::optional<std::string> text = lookupVariable(env, name);
  const std::optional<long long> value = text ? parseInteger(*text) : std::nullopt;
  if (!value || *value < 0) {
    throw InputError(fmt::format("{}: '{}' is not a non-negative integer", name, text.value_or("")));
  }
  return *value;
}

}  // namespace

std::vector<std::string> expandHostlist(std::string_view list, std::string_view field) {
  std::vector<std::string> hosts;
  size_t start = 0;
  int depth = 0;
  // Names part at commas outside brackets.
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    // The end closes the last name, whatever its brackets (expandName names an open one).
    if (c != ',' || (depth > 0 && i < list.size())) continue;
    const std::string_view name = list.substr(start, i - start);
    if (name.empty()) bad(field, list, "it has an empty name");
    for (const char n : name) {
      if (std::isspace(static_cast<unsigned char>(n)) != 0) bad(field, list, fmt::format("'{}' holds a space", name));
    }
    expandName(name, field, list, hosts);
    start = i + 1;
  }
  return hosts;
}

int slurmPort(long long job_id, long long step_id) {
  return kSlurmPortBase + static_cast<int>(job_id % 2000) * 10 + static_cast<int>(step_id % 10);
}

HostPort slurmCoordinator(const Environment& env) {
  std::string_view field;
  std::optional<std::string> list;
  for (const std::string_view name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if ((list = lookupVariable(env, name))) {
      field = name;
      break;
    }
  }
  if (!list) {
    throw InputError("SLURM_STEP_NODELIST is not set (nor SLURM_JOB_NODELIST): the coordinator is the step's first "
                     "node; pass --coordinator host:port, or set MASTER_ADDR and MASTER_PORT");
  }
  if (!lookupVariable(env, "SLURM_JOB_ID")) {
    throw InputError("SLURM_JOB_ID is not set: the coordinator's port is derived from it; pass --coordinator "
                     "host:port, or set MASTER_ADDR and MASTER_PORT");
  }
  const long long job = nonNegative(env, "SLURM_JOB_ID");
  const long long step = lookupVariable(env, "SLURM_STEP_ID") ? nonNegative(env, "SLURM_STEP_ID") : 0;
  return HostPort{expandHostlist(*list, field).front(), slurmPort(job, step)};
}

}  // namespace tandem::cluster
