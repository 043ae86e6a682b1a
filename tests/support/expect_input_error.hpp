#pragma once
// Asserts that `f` throws tandem::InputError whose message contains every
// needle; or gives its message, for a test that compares it whole.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"

namespace tandem::testing {

template <class F>
void expectInputError(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    std::string what = e.what();
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << what << " lacks " << n;
  }
}

// What `f`'s InputError says, or "(no InputError)".
template <class F>
std::string inputErrorOf(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

}  // namespace tandem::testing
