#pragma once
// An enum's text names, listed once per enum: its flag values, its JSON
// form in run configs and checkpoints, and the error for anything else.
#include <fmt/format.h>

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace tandem {

template <class E, size_t N>
using EnumNames = std::array<std::pair<E, std::string_view>, N>;

template <class E, size_t N>
std::string_view enumName(const EnumNames<E, N>& names, E value) {
  for (const auto& [e, name] : names) {
    if (e == value) return name;
  }
  return "?";
}

template <class E, size_t N>
std::vector<std::string> enumChoices(const EnumNames<E, N>& names) {
  std::vector<std::string> choices;
  for (const auto& entry : names) choices.emplace_back(entry.second);
  return choices;
}

// "a, b or c": how errors list allowed names.
inline std::string choicesText(const std::vector<std::string>& choices) {
  std::string text;
  for (size_t i = 0; i < choices.size(); ++i) text += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return text;
}

template <class E, size_t N>
std::string enumChoicesText(const EnumNames<E, N>& names) {
  return choicesText(enumChoices(names));
}

// Throws InputError "<what>: expected a, b or c, got 'x'".
template <class E, size_t N>
E parseEnum(const EnumNames<E, N>& names, std::string_view text, std::string_view what) {
  for (const auto& [e, name] : names) {
    if (name == text) return e;
  }
  throw InputError(fmt::format("{}: expected {}, got '{}'", what, enumChoicesText(names), text));
}

}  // namespace tandem
