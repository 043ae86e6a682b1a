#include "cli/arg_style.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace tandem::cli {
namespace {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string flagName(const std::string& arg) { return arg.substr(0, arg.find('=')); }

}  // namespace

std::vector<std::string> normalizeFlagSpelling(int argc, const char* const* argv) {
  std::vector<std::string> args;
  bool verbatim = false;  // a program's own arguments, after `launch ... -- PROGRAM`
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (!verbatim && arg == "--" && i + 1 < argc) verbatim = namesProgram(argv[i + 1]);
    if (!verbatim && i > 0 && arg.size() > 2 && arg.rfind("--", 0) == 0) {
      const size_t end = std::min(arg.find('='), arg.size());
      std::replace(arg.begin(), arg.begin() + static_cast<std::ptrdiff_t>(end), '_', '-');
    }
    args.push_back(std::move(arg));
  }
  return args;
}

bool namesProgram(const std::string& first_after_dashes) {
  return !first_after_dashes.empty() && first_after_dashes[0] != '-' && first_after_dashes != "train";
}

std::string closestFlag(const CLI::App& app, const std::string& given) {
  const std::string name = flagName(given);
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 4) + 1;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& long_name : option->get_lnames()) {
      const std::string candidate = "--" + long_name;
      const size_t d = editDistance(name, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    }
  }
  return best;
}

std::string unknownArgumentsMessage(const CLI::App& app, const std::vector<std::string>& unknown) {
  if (unknown.empty()) return "";
  std::vector<std::string> parts;
  bool after_flag = false;  // "--unknown 3": the 3 is its value, not another mistake
  for (const std::string& arg : unknown) {
    if (arg.rfind("-", 0) != 0) {
      if (!after_flag) parts.push_back(fmt::format("unexpected argument '{}'", arg));
      after_flag = false;
      continue;
    }
    after_flag = arg.find('=') == std::string::npos;
    const std::string suggestion = closestFlag(app, arg);
    parts.push_back(suggestion.empty() ? fmt::format("unknown flag {}", flagName(arg))
                                       : fmt::format("unknown flag {} (did you mean {}?)", flagName(arg), suggestion));
  }
  std::string command = app.get_name();
  for (const CLI::App* parent = app.get_parent(); parent != nullptr && parent->get_parent() != nullptr;
       parent = parent->get_parent()) {
    command = parent->get_name() + " " + command;
  }
  return fmt::format("{}; see `tandem {} --help`", fmt::join(parts, "; "), command);
}

void collectUnknownArguments(CLI::App& app) {
  app.allow_extras();
  for (CLI::App* sub : app.get_subcommands({})) collectUnknownArguments(*sub);
}

std::vector<std::string> unknownArguments(CLI::App& app, const CLI::App** where) {
  // Each command keeps what it did not recognise; walk the chosen chain,
  // outermost first, which is the order they were given in.
  std::vector<std::string> unknown;
  CLI::App* command = &app;
  while (true) {
    for (auto& arg : command->remaining()) {
      if (arg != "--") unknown.push_back(std::move(arg));  // the separator before positional arguments
    }
    auto chosen = command->get_subcommands();
    if (chosen.empty()) break;
    command = chosen.front();
  }
  *where = command;
  return unknown;
}

std::optional<std::string> flagValue(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind(flag + "=", 0) == 0) return args[i].substr(flag.size() + 1);
  }
  return std::nullopt;
}

bool hasFlag(const std::vector<std::string>& args, const std::string& flag) {
  for (const auto& a : args) {
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

}  // namespace tandem::cli
