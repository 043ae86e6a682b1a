#include "core/training_mode.hpp"

#include <fmt/format.h>

#include <array>

#include "core/enum_names.hpp"
#include "core/error.hpp"

namespace tandem {
namespace {

constexpr std::array kModes{Mode::Standalone, Mode::AllReduce, Mode::PsSync, Mode::PsAsync, Mode::Ssp};
constexpr std::string_view kServerPrefix = "ps-";

Mode parseAmong(std::string_view text, std::string_view what, bool servers_only) {
  std::string names;
  for (Mode mode : kModes) {
    if (servers_only && !usesServers(mode)) continue;
    if (text == modeName(mode)) return mode;
    names += (names.empty() ? "" : ", ") + std::string(modeName(mode));
  }
  // The spelling of earlier releases gets its new name.
  const std::string_view hint = text == "ssp" ? " (bounded staleness is now ps-ssp)" : "";
  throw InputError(fmt::format("{}: unknown mode '{}'{}; use one of {}", what, text, hint, names));
}

}  // namespace

std::string_view modeName(Mode mode) {
  switch (mode) {
    case Mode::Standalone: return "standalone";
    case Mode::AllReduce: return "allreduce";
    case Mode::PsSync: return "ps-sync";
    case Mode::PsAsync: return "ps-async";
    case Mode::Ssp: return "ps-ssp";
  }
  return "?";
}

Mode parseMode(std::string_view text, std::string_view what) { return parseAmong(text, what, false); }

Mode parseServerMode(std::string_view text, std::string_view what) { return parseAmong(text, what, true); }

std::string_view psModeChoice(Mode mode) {
  TANDEM_ENFORCE(mode == Mode::PsSync || mode == Mode::PsAsync, "--ps-mode spells ps-sync and ps-async only");
  return modeName(mode).substr(kServerPrefix.size());
}

std::vector<std::string> psModeChoices() {
  return {std::string(psModeChoice(Mode::PsSync)), std::string(psModeChoice(Mode::PsAsync))};
}

Mode parsePsModeChoice(std::string_view text, std::string_view what) {
  for (Mode mode : {Mode::PsSync, Mode::PsAsync}) {
    if (text == psModeChoice(mode)) return mode;
  }
  throw InputError(fmt::format("{}: expected {}, got '{}'", what, choicesText(psModeChoices()), text));
}

}  // namespace tandem
