#pragma once
// The process's environment variables, read here and nowhere else. Each
// entry point (the CLI's main, the C++ API's and Python's init) captures
// them once and hands the map down, so that a function's inputs are in its
// signature and a test can hand it any environment it likes.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

using Environment = std::map<std::string, std::string, std::less<>>;

// Every variable this process has now.
Environment captureEnvironment();

// The variable's value; nullopt when it is unset.
std::optional<std::string> lookupVariable(const Environment& env, std::string_view name);
// Its value, or `fallback` when it is unset.
std::string variableOr(const Environment& env, std::string_view name, std::string_view fallback);

// `env` as exec takes it: "NAME=value" strings.
std::vector<std::string> environmentEntries(const Environment& env);

// Sets each variable given a value and unsets each given none, for the
// entry points that capture the environment next in this process: what a
// launcher running inside it hands over (tandem.ray in a Ray worker, as
// torchrun hands its processes RANK and the rest).
void exportVariables(const std::map<std::string, std::optional<std::string>, std::less<>>& variables);

}  // namespace tandem
