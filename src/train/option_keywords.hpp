#pragma once
// The declaration's keyword face (train/train_options.hpp): the names the
// C++ API's option structs and tandem.torch's keywords give the options,
// their defaults, and values given by keyword checked as their flags are.
// Torch-free.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "train/config.hpp"
#include "train/train_options.hpp"

namespace tandem::train {

// The option the APIs call `keyword`, or null.
const TrainOption* optionByKeyword(std::string_view keyword);
// Its default: its field's value in a default TrainConfig.
nlohmann::json keywordDefault(const TrainOption& option);

// Sets the fields `values` ({keyword: value}; null: leave the default)
// name, each typed and checked as its flag is, then runs the distributed
// checks. Throws InputError "<who>: <the check's message>" with options
// named by keyword.
void applyKeywordValues(TrainConfig& config, const nlohmann::json& values, std::string_view who);

// `message` with every option's flag ("--ps-chunk-mb") spelled as its
// keyword ("ps_chunk_mb"): the APIs' errors come from the CLI's checks.
std::string inKeywordTerms(std::string_view message);

}  // namespace tandem::train
