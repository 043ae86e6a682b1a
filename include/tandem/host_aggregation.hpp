#pragma once
// Whether each host's workers sum over loopback before anything crosses a
// link (`tandem train --hierarchical`, InitOptions::hierarchical): where
// that spares a link (kAuto), or never (kOff). Std-only; its names ("auto",
// "off") are in cluster/host_aggregation.hpp.

namespace tandem {

enum class HostAggregation { kAuto, kOff };

}  // namespace tandem
