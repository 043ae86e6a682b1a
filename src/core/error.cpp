#include "core/error.hpp"

namespace tandem {

std::string formatLocation(const std::source_location& loc) {
  std::string_view file = loc.file_name();
  if (auto pos = file.rfind("/src/"); pos != std::string_view::npos) file.remove_prefix(pos + 1);
  return fmt::format("{}:{}", file, loc.line());
}

void throwEnforceFailure(std::string_view expr, std::string_view detail,
                         const std::source_location& loc) {
  if (detail.empty()) {
    throw Error(fmt::format("check failed: {} at {}", expr, formatLocation(loc)));
  }
  throw Error(fmt::format("check failed: {} ({}) at {}", expr, detail, formatLocation(loc)));
}

}  // namespace tandem
