#pragma once
// What a parameter-server policy (ChunkStore, Admission) said when it
// refused a request: its reason, or "(not refused)".
#include <functional>
#include <string>

#include "ps/chunk_store.hpp"  // ps::Refusal

namespace tandem::testing {

inline std::string refusalOf(const std::function<void()>& request) {
  try {
    request();
  } catch (const ps::Refusal& r) {
    return r.reason;
  }
  return "(not refused)";
}

}  // namespace tandem::testing
