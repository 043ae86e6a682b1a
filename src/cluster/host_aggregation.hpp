#pragma once
// --hierarchical's setting, apart from the host-group machinery so that the
// run config can name it without the coordinator's headers. Torch-free.
#include <nlohmann/json.hpp>

#include <string>

#include "core/enum_names.hpp"

namespace tandem::cluster {

// Sum each host's workers first where that spares a link (auto), or never
// (off).
enum class HostAggregation { kAuto, kOff };
inline constexpr EnumNames<HostAggregation, 2> kHostAggregationNames = {
    {{HostAggregation::kAuto, "auto"}, {HostAggregation::kOff, "off"}}};
inline void to_json(nlohmann::json& j, HostAggregation a) { j = enumName(kHostAggregationNames, a); }
inline void from_json(const nlohmann::json& j, HostAggregation& a) {
  a = parseEnum(kHostAggregationNames, j.get<std::string>(), "hierarchical");
}

}  // namespace tandem::cluster
