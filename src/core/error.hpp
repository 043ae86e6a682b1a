#pragma once
// Error tiers (see DESIGN.md): InputError for bad files/flags/frames that the
// user can fix, PeerError for a remote process that failed or went silent,
// and Error for everything else. ENFORCE-style checks carry both values and
// the source location of the check.
#include <fmt/format.h>

#include <source_location>
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

std::string formatLocation(const std::source_location& loc);

[[noreturn]] void throwEnforceFailure(std::string_view expr, std::string_view detail,
                                      const std::source_location& loc);

template <class A, class B>
void enforceEq(const A& a, const B& b, std::string_view what,
               const std::source_location loc = std::source_location::current()) {
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
                                    std::source_location::current());                   \
    }                                                                                   \
  } while (0)
