#pragma once
// The defaults of the API structs' fields, read from the one declaration of
// Tandem's options (src/train/train_options.cpp), which `tandem train`'s
// flags and tandem.torch's keywords read too. Std-only.
#include <string>
#include <string_view>

namespace tandem {

// The default of the option the C++ API and tandem.torch call `keyword`
// (ps_chunk_mb, local_steps, wire_dtype, ...), as `tandem train --help`
// shows it. Throws std::logic_error for a keyword no option has or a type
// its value is not: a bug in the caller, not input. Thread-safe.
// Instantiated for bool, int, int64_t, uint64_t, double, std::string, Mode,
// WireDtype and HostAggregation.
template <class T>
T option_default(std::string_view keyword);

}  // namespace tandem
