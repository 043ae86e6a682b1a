#include "core/environment.hpp"

#include <stdlib.h>

extern char** environ;

namespace tandem {

Environment captureEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view kv(*entry);
    const size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

std::optional<std::string> lookupVariable(const Environment& env, std::string_view name) {
  const auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::string variableOr(const Environment& env, std::string_view name, std::string_view fallback) {
  const auto it = env.find(name);
  return it == env.end() ? std::string(fallback) : it->second;
}

std::vector<std::string> environmentEntries(const Environment& env) {
  std::vector<std::string> entries;
  entries.reserve(env.size());
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  return entries;
}

void exportVariables(const std::map<std::string, std::optional<std::string>, std::less<>>& variables) {
  for (const auto& [name, value] : variables) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
}

}  // namespace tandem
