#include "api/negotiation.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tandem::api {
namespace {

const char* dtypeName(int32_t dtype) {
  static const char* names[] = {"uint8",    "int8",    "int32",   "int64", "float16",
                                "bfloat16", "float32", "float64", "int16"};
  return dtype >= 0 && dtype < 9 ? names[dtype] : "unknown";
}

const char* opName(int32_t op) {
  static const char* names[] = {"sum", "product", "min", "max"};
  return op >= 0 && op < 4 ? names[op] : "unknown";
}

bool servableWhileJoined(CallKind kind) {
  return kind == CallKind::kAllreduce || kind == CallKind::kGradients || kind == CallKind::kBarrier;
}

}  // namespace

std::string describe(const Announcement& call) {
  switch (call.kind) {
    case CallKind::kAllreduce:
      return fmt::format("allreduce ({}) of {} {} values", opName(call.op), call.count, dtypeName(call.dtype));
    case CallKind::kAllgather:
      return fmt::format("allgather of {} rows of {}", call.count, dtypeName(call.dtype));
    case CallKind::kBroadcast:
      return fmt::format("broadcast of {} {} values from rank {}", call.count, dtypeName(call.dtype), call.root);
    case CallKind::kAlltoall: return fmt::format("alltoall of {} rows of {}", call.count, dtypeName(call.dtype));
    case CallKind::kBarrier: return "barrier";
    case CallKind::kGradients: return "a DistributedOptimizer gradient exchange";
    case CallKind::kJoin: return "join";
    case CallKind::kProcessSets:
      return call.op == 0 ? fmt::format("add_process_set of {} ranks", call.count)
                          : fmt::format("remove_process_set of set {}", call.count);
  }
  return "an unknown call";
}

Agreement agree(const std::vector<Announcement>& all) {
  Agreement out;
  std::vector<int> active;
  for (const auto& a : all) out.counts.push_back(a.count);
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    (all[r].kind == CallKind::kJoin ? out.joined : active).push_back(r);
  }
  if (active.empty()) {
    out.all_joined = true;
    for (int r : out.joined) {
      if (all[r].first_join) out.last_joined = r;
    }
    if (out.last_joined < 0) out.last_joined = out.joined.back();
    return out;
  }
  out.call = all[active.front()];
  std::vector<int> invalid;
  std::vector<int> differ;
  for (int r : active) {
    if (all[r].invalid) invalid.push_back(r);
    if (all[r].kind != out.call.kind || all[r].signature != out.call.signature) differ.push_back(r);
  }
  if (!invalid.empty()) {
    out.error = fmt::format("rank(s) {} refused their own arguments to {} (their error says why)",
                            fmt::join(invalid, ", "), describe(all[invalid.front()]));
  } else if (!differ.empty()) {
    out.error = fmt::format("rank {} called {}, but rank(s) {} called {}; every rank must make the same "
                            "collective calls, in the same order, with the same dtypes, ops and shapes "
                            "(the first dimension may differ for allgather and alltoall)",
                            active.front(), describe(out.call), fmt::join(differ, ", "), describe(all[differ.front()]));
  } else if (!out.joined.empty() && !servableWhileJoined(out.call.kind)) {
    out.error = fmt::format("{} on rank(s) {} while rank(s) {} have called join(); only allreduce, "
                            "DistributedOptimizer steps and barrier continue after a rank joins",
                            describe(out.call), fmt::join(active, ", "), fmt::join(out.joined, ", "));
  }
  return out;
}

}  // namespace tandem::api
