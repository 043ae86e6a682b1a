#include "core/training_mode.hpp"

#include <fmt/format.h>

#include <array>

#include "core/error.hpp"

namespace tandem {
namespace {

constexpr std::array kModes{TrainingMode::kStandalone, TrainingMode::kAllReduce, TrainingMode::kPsSync,
                            TrainingMode::kPsAsync, TrainingMode::kPsBounded};

TrainingMode parseAmong(std::string_view text, std::string_view what, bool servers_only) {
  std::string names;
  for (TrainingMode mode : kModes) {
    if (servers_only && !usesServers(mode)) continue;
    if (text == modeName(mode)) return mode;
    names += (names.empty() ? "" : ", ") + std::string(modeName(mode));
  }
  // The spelling of earlier releases gets its new name.
  const std::string_view hint = text == "ssp" ? " (bounded staleness is now ps-ssp)" : "";
  throw InputError(fmt::format("{}: unknown mode '{}'{}; use one of {}", what, text, hint, names));
}

}  // namespace

std::string_view modeName(TrainingMode mode) {
  switch (mode) {
    case TrainingMode::kStandalone: return "standalone";
    case TrainingMode::kAllReduce: return "allreduce";
    case TrainingMode::kPsSync: return "ps-sync";
    case TrainingMode::kPsAsync: return "ps-async";
    case TrainingMode::kPsBounded: return "ps-ssp";
  }
  return "?";
}

TrainingMode parseTrainingMode(std::string_view text, std::string_view what) { return parseAmong(text, what, false); }

TrainingMode parseServerMode(std::string_view text, std::string_view what) { return parseAmong(text, what, true); }

}  // namespace tandem
