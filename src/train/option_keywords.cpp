#include "train/option_keywords.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>

#include "core/error.hpp"
#include "tandem/option_defaults.hpp"

namespace tandem::train {
namespace {

bool flagCharacter(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

// What a field of this default's type takes, for errors.
const char* kindOf(const nlohmann::json& current) {
  if (current.is_boolean()) return "true or false";
  if (current.is_number_integer()) return "an integer";
  if (current.is_number()) return "a number";
  if (current.is_array()) return "a list of numbers";
  return "text";
}

// A value given by keyword as the text its flag would take.
std::vector<std::string> asFlagTexts(const TrainOption& o, const nlohmann::json& current, const nlohmann::json& value) {
  const auto text = [&](const nlohmann::json& v) {
    if (v.is_string() || v.is_number()) return v.is_string() ? v.get<std::string>() : v.dump();
    throw InputError(fmt::format("{}: expected {}, got {}", o.keyword(), kindOf(current), value.dump()));
  };
  if (o.list == TrainOption::List::kNone) return {text(value)};
  if (!value.is_array()) return {text(value)};
  std::vector<std::string> texts;
  for (const auto& item : value) texts.push_back(text(item));
  return texts;
}

}  // namespace

const TrainOption* optionByKeyword(std::string_view keyword) {
  for (const auto& o : trainOptions()) {
    if (o.keyword() == keyword) return &o;
  }
  return nullptr;
}

nlohmann::json keywordDefault(const TrainOption& option) {
  static const nlohmann::json defaults = toJson(TrainConfig{});
  return defaults.at(nlohmann::json::json_pointer(option.field));
}

void applyKeywordValues(TrainConfig& config, const nlohmann::json& values, std::string_view who) {
  try {
    nlohmann::json j = toJson(config);
    for (const auto& [keyword, value] : values.items()) {
      const TrainOption* o = optionByKeyword(keyword);
      if (o == nullptr) throw InputError(fmt::format("unknown option '{}'", keyword));
      if (value.is_null()) continue;
      const nlohmann::json::json_pointer field(o->field);
      const nlohmann::json& current = j.at(field);
      const bool fits = current.is_boolean()                  ? value.is_boolean()
                        : current.is_string() || o->parse != nullptr ? value.is_string()
                        : current.is_number() ? value.is_number()
                                              : value.is_array() || value.is_number();
      if (!fits) {
        throw InputError(fmt::format("{}: expected {}, got {}", o->keyword(), kindOf(current), value.dump()));
      }
      j[field] = value.is_boolean() ? value : parseOptionValue(*o, current, asFlagTexts(*o, current, value));
    }
    config = trainConfigFromJson(j);
    validateDistributed(config.distributed);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", who, inKeywordTerms(e.what())));
  }
}

std::string inKeywordTerms(std::string_view message) {
  std::string out;
  for (size_t i = 0; i < message.size();) {
    bool replaced = false;
    if (message.compare(i, 2, "--") == 0 && (i == 0 || !flagCharacter(message[i - 1]))) {
      size_t end = i + 2;
      while (end < message.size() && flagCharacter(message[end])) ++end;
      const std::string_view flag = message.substr(i, end - i);
      for (const auto& o : trainOptions()) {
        if (o.hasFlag(flag)) {
          out += o.keyword();
          i = end;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += message[i++];
  }
  return out;
}

}  // namespace tandem::train

namespace tandem {

template <class T>
T option_default(std::string_view keyword) {
  const train::TrainOption* o = train::optionByKeyword(keyword);
  if (o == nullptr) throw std::logic_error(fmt::format("tandem::option_default: no option is called '{}'", keyword));
  try {
    return train::keywordDefault(*o).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw std::logic_error(fmt::format("tandem::option_default: {} is not of the type asked: {}", keyword, e.what()));
  }
}

template bool option_default<bool>(std::string_view);
template int option_default<int>(std::string_view);
template int64_t option_default<int64_t>(std::string_view);
template uint64_t option_default<uint64_t>(std::string_view);
template double option_default<double>(std::string_view);
template std::string option_default<std::string>(std::string_view);
template Mode option_default<Mode>(std::string_view);
template WireDtype option_default<WireDtype>(std::string_view);
template HostAggregation option_default<HostAggregation>(std::string_view);

}  // namespace tandem
