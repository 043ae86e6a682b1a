#pragma once
// The names of the one mode enum (tandem/mode.hpp), spelled one way
// everywhere: flags and the APIs parse them, and summaries, logs, the lab
// and the servers print them. `--ps-mode` takes a server mode's name without
// its "ps-" (sync, async). Torch-free.
#include <string>
#include <string_view>
#include <vector>

#include "tandem/mode.hpp"

namespace tandem {

std::string_view modeName(Mode mode);

// One of the names above (parseServerMode: ps-sync, ps-async or ps-ssp).
// Throws InputError naming `what`, the text and the names it could have been.
Mode parseMode(std::string_view text, std::string_view what);
Mode parseServerMode(std::string_view text, std::string_view what);

constexpr bool usesServers(Mode mode) { return mode == Mode::PsSync || mode == Mode::PsAsync || mode == Mode::Ssp; }

// `--ps-mode`'s spelling of PsSync and PsAsync ("sync", "async"): the
// server mode's name without "ps-". Ssp has none: --staleness selects it.
std::string_view psModeChoice(Mode mode);
Mode parsePsModeChoice(std::string_view text, std::string_view what);
std::vector<std::string> psModeChoices();

}  // namespace tandem
