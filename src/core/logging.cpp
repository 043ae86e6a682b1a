#include "core/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.hpp"

namespace tandem {

void configureLogging(std::string_view level) {
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    throw InputError(fmt::format("--log-level: unknown level '{}' (use debug, info, warn, error)", level));
  }
  // Logs go to stderr so that stdout stays machine-readable.
  auto logger = spdlog::get("tandem");
  if (!logger) logger = spdlog::stderr_color_mt("tandem");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(parsed);
}

}  // namespace tandem
