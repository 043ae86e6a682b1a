#include "core/patient_wait.hpp"

#include <fmt/format.h>

namespace tandem {

std::string formatDuration(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
}

}  // namespace tandem
