#pragma once
// --hierarchical's setting, apart from the host-group machinery so that the
// run config can name it without the coordinator's headers. Torch-free.
#include "core/enum_json.hpp"
#include "tandem/host_aggregation.hpp"

namespace tandem::cluster {

using tandem::HostAggregation;
inline constexpr EnumNames<HostAggregation, 2> kHostAggregationNames = {
    {{HostAggregation::kAuto, "auto"}, {HostAggregation::kOff, "off"}}};

}  // namespace tandem::cluster

namespace tandem {
TANDEM_ENUM_JSON(HostAggregation, cluster::kHostAggregationNames, "hierarchical")
}  // namespace tandem
