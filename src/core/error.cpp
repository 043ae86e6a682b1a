#include "core/error.hpp"

namespace tandem {

std::string formatLocation(const SourceLocation& loc) {
  std::string_view file = loc.file;
  if (auto pos = file.rfind("/src/"); pos != std::string_view::npos) file.remove_prefix(pos + 1);
  return fmt::format("{}:{}", file, loc.line);
}

void throwEnforceFailure(std::string_view expr, std::string_view detail, const SourceLocation& loc) {
  if (detail.empty()) {
    throw Error(fmt::format("check failed: {} at {}", expr, formatLocation(loc)));
  }
  throw Error(fmt::format("check failed: {} ({}) at {}", expr, detail, formatLocation(loc)));
}

}  // namespace tandem
