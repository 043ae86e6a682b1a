#include <gtest/gtest.h>

#include "core/error.hpp"

namespace tandem {
namespace {

TEST(Enforce, NamesExpressionDetailAndLocation) {
  try {
    int widgets = 3;
    TANDEM_ENFORCE(widgets == 4, "have {} widgets", widgets);
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("widgets == 4"), std::string::npos) << what;
    EXPECT_NE(what.find("have 3 widgets"), std::string::npos) << what;
    EXPECT_NE(what.find("core_error_test.cpp:"), std::string::npos) << what;
  }
}

TEST(Enforce, PassingCheckDoesNotThrow) { EXPECT_NO_THROW(TANDEM_ENFORCE(1 + 1 == 2)); }

TEST(EnforceEq, PrintsBothValues) {
  try {
    enforceEq(7, 9, "tensor count");
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("tensor count"), std::string::npos) << what;
    EXPECT_NE(what.find("7 != 9"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(enforceEq(std::string("a"), std::string("a"), "names"));
}

TEST(ErrorTiers, InputAndPeerErrorsAreErrors) {
  EXPECT_THROW(throw InputError("x"), Error);
  EXPECT_THROW(throw PeerError("x"), Error);
}

}  // namespace
}  // namespace tandem
