#pragma once
// Every field of the run config that is stored, declared once: where it
// lives in toJson's form (what checkpoints store, --resume merges and
// summary.json reports) with its typed read and write, and, for a
// `tandem train` option, its flag, its keyword in the APIs, its help, the
// modes it changes anything in, and for a named setting its allowed names.
// Its type and default are TrainConfig's own. toJson and
// trainConfigFromJson walk these fields; the CLI registers the options,
// parses their values here, and refuses the strict ones given to a run
// they cannot change. Torch-free.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/training_mode.hpp"

namespace tandem::train {

struct TrainConfig;

// A set of Modes.
using ModeSet = uint8_t;
constexpr ModeSet modeBit(Mode m) { return static_cast<ModeSet>(1u << static_cast<unsigned>(m)); }
inline constexpr ModeSet kServerModes =
    modeBit(Mode::PsSync) | modeBit(Mode::PsAsync) | modeBit(Mode::Ssp);
inline constexpr ModeSet kDistributedModes = modeBit(Mode::AllReduce) | kServerModes;
inline constexpr ModeSet kEveryMode = modeBit(Mode::Standalone) | kDistributedModes;

struct TrainOption {
  std::string flags{};  // CLI11's spelling: "--eps,--adam-eps" (aliases after the first); empty: stored only
  std::string field{};  // "/optimizer/eps"
  nlohmann::json (*read)(const TrainConfig&) = nullptr;
  void (*write)(TrainConfig&, const nlohmann::json&) = nullptr;  // throws nlohmann's errors
  std::string help{};
  std::string group{};  // help section; empty: the general one
  ModeSet modes = kEveryMode;  // where a value changes the run
  // Given for a run of another mode, it is refused (InputError) rather than
  // ignored: it selects behaviour the user would otherwise think they got.
  bool strict = false;
  std::vector<std::string> choices{};  // a named setting's names
  bool show_default = true;          // false where the default depends on other flags
  // A list, given comma-separated or as several values (its default may be
  // empty, so its element type is stated).
  enum class List { kNone, kIntegers, kNumbers } list = List::kNone;
  // A value written other than as the field's JSON (--synthetic-shape
  // 3x32x32): its parse, InputError naming the flag. Null: by the field's type.
  nlohmann::json (*parse)(std::string_view text) = nullptr;
  // What the C++ API's option structs and tandem.torch's keywords call it
  // (train/option_keywords.hpp); empty: the field's last part
  // ("/distributed/ps_chunk_mb": ps_chunk_mb).
  std::string keyword_name{};

  std::string_view name() const;     // the first flag: "--eps"
  std::string_view keyword() const;  // "eps"
  bool hasFlag(std::string_view flag) const;  // any of its spellings
};

// Every stored field, in help order.
const std::vector<TrainOption>& configFields();
// Those with a flag: the CLI's options and the APIs' keywords.
const std::vector<TrainOption>& trainOptions();
// The option of `field`; Error when there is none (a bug, not input).
const TrainOption& trainOption(std::string_view field);

// The value `texts` give the option, typed as `current` (the field's value
// now: a boolean, an integer, a number, a name, or a list of numbers given
// comma-separated or as several values). Throws InputError naming the flag.
nlohmann::json parseOptionValue(const TrainOption& option, const nlohmann::json& current,
                                const std::vector<std::string>& texts);

// Refuses (InputError naming the flag and the mode) a strict option given
// to a run of `mode`; a non-strict one is accepted and changes nothing.
void requireApplies(const TrainOption& option, Mode mode);

}  // namespace tandem::train
