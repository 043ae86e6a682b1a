#pragma once
// --hierarchical's setting, apart from the host-group machinery so that the
// run config can name it without the coordinator's headers. Torch-free.
#include "core/enum_json.hpp"

namespace tandem::cluster {

// Sum each host's workers first where that spares a link (auto), or never
// (off).
enum class HostAggregation { kAuto, kOff };
inline constexpr EnumNames<HostAggregation, 2> kHostAggregationNames = {
    {{HostAggregation::kAuto, "auto"}, {HostAggregation::kOff, "off"}}};
TANDEM_ENUM_JSON(HostAggregation, kHostAggregationNames, "hierarchical")

}  // namespace tandem::cluster
