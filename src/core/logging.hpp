#pragma once
// Thin wrapper so that layers log through one configured spdlog logger
// without each choosing its own sink or format.
#include <spdlog/spdlog.h>

#include <string_view>

namespace tandem {

// Sets the process-wide log level ("debug", "info", "warn", "error").
// Throws InputError on an unknown level name. Not thread-safe against
// concurrent logging; call once at start-up.
void configureLogging(std::string_view level);

}  // namespace tandem

#define TANDEM_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define TANDEM_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define TANDEM_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define TANDEM_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
