#pragma once
// Spelling rules every `tandem` command shares: `--task_index` and
// `--task-index` are one flag, and an unknown flag gets a message that names
// it (in the order given) with the closest known flag.
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tandem::cli {

// argv with '_' turned into '-' in every long flag's name (the part before
// '='); values and positional arguments are untouched, and so is everything
// from `-- PROGRAM` on (a launched program's own flags).
std::vector<std::string> normalizeFlagSpelling(int argc, const char* const* argv);

// Whether the first word after `launch ... --` names a program to run rather
// than `tandem train` arguments: neither a flag nor "train".
bool namesProgram(const std::string& first_after_dashes);

// In arguments handed on to `tandem train`: the value of `--flag v` or
// `--flag=v` if given, and whether the flag is there at all.
std::optional<std::string> flagValue(const std::vector<std::string>& args, const std::string& flag);
bool hasFlag(const std::vector<std::string>& args, const std::string& flag);

// The closest long flag of `app` to `given` within a small edit distance,
// or "" when none is close.
std::string closestFlag(const CLI::App& app, const std::string& given);

// For arguments `app` did not recognise, one message naming each, in the
// order given, with a "did you mean" where one flag is close; "" if none.
std::string unknownArgumentsMessage(const CLI::App& app, const std::vector<std::string>& unknown);

// Lets every command collect what it did not recognise instead of failing
// with CLI11's own message (see unknownArgumentsMessage).
void collectUnknownArguments(CLI::App& app);

// The chosen leaf command's unrecognised arguments, in the order given;
// sets `*where` to that command.
std::vector<std::string> unknownArguments(CLI::App& app, const CLI::App** where);

}  // namespace tandem::cli
