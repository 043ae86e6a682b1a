#pragma once
// Error tiers (see DESIGN.md): InputError for bad files/flags/frames that the
// user can fix, PeerError for a remote process that failed or went silent,
// and Error for everything else. ENFORCE-style checks carry both values and
// the source location of the check.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad input: the message names the file, flag or field at fault.
class InputError : public Error {
 public:
  using Error::Error;
};

// The ranks called a collective differently (its kind, dtype, shapes or
// root), each with arguments it found fine: the program is at fault, as for
// any bad input, and the message names the ranks that differ. Python sees
// Horovod's HorovodInternalError, which is also a ValueError.
class MismatchError : public InputError {
 public:
  using InputError::InputError;
};

// A peer failed or did not answer in time; the message names the peer.
class PeerError : public Error {
 public:
  using Error::Error;
};

// A wait given up because the process was asked to stop (SIGINT/SIGTERM):
// the command exits 130, as a shell reports an interrupted program.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// This worker left a live job when asked to (SIGUSR2), and the others go on
// without it: no failure, the command exits 0.
class Departed : public Error {
 public:
  using Error::Error;
};

// Where a check sits. std::source_location's, from the builtins that GCC
// and clang 14 (the sanitizer and fuzzing builds) both have: libstdc++'s
// std::source_location needs a builtin clang 14 lacks.
struct SourceLocation {
  const char* file = "";
  unsigned line = 0;
  static constexpr SourceLocation current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return {file, line};
  }
};

std::string formatLocation(const SourceLocation& loc);

[[noreturn]] void throwEnforceFailure(std::string_view expr, std::string_view detail, const SourceLocation& loc);

template <class A, class B>
void enforceEq(const A& a, const B& b, std::string_view what, const SourceLocation loc = SourceLocation::current()) {
  if (!(a == b)) {
    throwEnforceFailure(what, fmt::format("{} != {}", a, b), loc);
  }
}

}  // namespace tandem

// Internal invariant check: throws tandem::Error naming the expression and location.
#define TANDEM_ENFORCE(cond, ...)                                                       \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      ::tandem::throwEnforceFailure(#cond, ::fmt::format("" __VA_ARGS__),               \
                                    ::tandem::SourceLocation::current());               \
    }                                                                                   \
  } while (0)
