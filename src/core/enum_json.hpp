#pragma once
// An enum's JSON form is its name in its EnumNames table: run configs and
// checkpoints store the flag's own spelling, and refuse any other.
#include <nlohmann/json.hpp>

#include <string>

#include "core/enum_names.hpp"

// Defines to_json and from_json for `Enum` from its table `names`; `what`
// names the setting in errors. Use it in Enum's own namespace, where
// nlohmann looks for them.
#define TANDEM_ENUM_JSON(Enum, names, what)                                               \
  inline void to_json(nlohmann::json& j, Enum e) { j = ::tandem::enumName(names, e); }   \
  inline void from_json(const nlohmann::json& j, Enum& e) {                               \
    e = ::tandem::parseEnum(names, j.get<std::string>(), what);                           \
  }
