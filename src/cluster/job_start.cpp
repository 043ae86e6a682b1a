#include "cluster/job_start.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <random>
#include <string_view>

#include "core/error.hpp"

namespace tandem::cluster {
namespace {

constexpr const char* kVariable = "TANDEM_RESTART";

}  // namespace

void parseRestartEnvironment(std::string_view text, JobStart& start) {
  while (!text.empty()) {
    const size_t end = std::min(text.find(';'), text.size());
    const std::string_view item = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    const size_t eq = item.find('=');
    const std::string_view name = item.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    int64_t number = 0;
    uint64_t hex = 0;
    const char* last = value.data() + value.size();
    const auto [ptr, ec] = name == "replaces" ? std::from_chars(value.data(), last, hex, 16)
                                              : std::from_chars(value.data(), last, number);
    if (value.empty() || ec != std::errc() || ptr != last) {
      throw InputError(fmt::format("{}: '{}' is not name=number", kVariable, item));
    }
    if (name == "replaces") {
      start.replaces = hex;
    } else if (name == "until_ms") {
      start.wait_until = std::chrono::system_clock::time_point(std::chrono::milliseconds(number));
    } else if (name == "restarts") {
      start.restarts = static_cast<int>(number);
    } else if (name == "joins_running") {
      start.joins_running = number != 0;
    } else {
      throw InputError(fmt::format("{}: unknown field '{}'", kVariable, name));
    }
  }
}

void readRestartEnvironment(const Environment& env, JobStart& start) {
  if (const auto text = lookupVariable(env, kVariable)) parseRestartEnvironment(*text, start);
}

uint64_t newGeneration() {
  std::random_device device;
  uint64_t g = 0;
  while (g == 0) g = (static_cast<uint64_t>(device()) << 32) ^ device();
  return g;
}

std::string restartEnvironment(const JobStart& start, double wait_s) {
  const auto until = std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  const auto until_ms = std::chrono::duration_cast<std::chrono::milliseconds>(until.time_since_epoch()).count();
  // A generation of 0 (this process never joined) is replaced by nothing.
  return fmt::format("replaces={:x};until_ms={};restarts={}", start.generation ? start.generation : start.replaces,
                     until_ms, start.restarts + 1);
}

double startupSeconds(const JobStart& start, double configured) {
  const auto& until = start.wait_until;
  if (!until) return configured;
  const double left = std::chrono::duration<double>(*until - std::chrono::system_clock::now()).count();
  return std::max(1.0, left);
}

std::string generationText(uint64_t generation) { return fmt::format("{:016x}", generation); }

uint64_t parseGeneration(std::string_view text) {
  uint64_t generation = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), generation, 16);
  return ec == std::errc() && ptr == text.data() + text.size() ? generation : 0;
}

}  // namespace tandem::cluster
