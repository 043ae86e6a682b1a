#pragma once
// How a run trains, spelled one way everywhere: flags and the APIs parse
// these names, and summaries, logs, the lab and the servers print them.
// Torch-free.
#include <string_view>

namespace tandem {

enum class TrainingMode {
  kStandalone,  // "standalone"
  kAllReduce,   // "allreduce"
  kPsSync,      // "ps-sync": parameter servers, every worker's gradient each step
  kPsAsync,     // "ps-async": each push applied as it arrives
  kPsBounded,   // "ps-ssp": stale synchronous parallel, at most `staleness` steps apart
};

std::string_view modeName(TrainingMode mode);

// One of the names above (parseServerMode: ps-sync, ps-async or ps-ssp).
// Throws InputError naming `what`, the text and the names it could have been.
TrainingMode parseTrainingMode(std::string_view text, std::string_view what);
TrainingMode parseServerMode(std::string_view text, std::string_view what);

constexpr bool usesServers(TrainingMode mode) {
  return mode == TrainingMode::kPsSync || mode == TrainingMode::kPsAsync || mode == TrainingMode::kPsBounded;
}

}  // namespace tandem
