// Which address a task listens on, and which one peers reach it from.
#include <gtest/gtest.h>

#include <string>

#include "cluster/local_address.hpp"
#include "core/error.hpp"

namespace tandem::cluster {
namespace {

TEST(BindableAddress, ANameBindsTheAddressItNamesHereNeverEveryInterface) {
  EXPECT_EQ(bindableAddress("localhost"), "127.0.0.1");  // IPv4 first, though it may resolve to ::1 too
  EXPECT_EQ(bindableAddress("127.0.0.2"), "127.0.0.2");  // literals as given
  EXPECT_EQ(bindableAddress("0.0.0.0"), "0.0.0.0");      // every interface only when asked for
  EXPECT_EQ(bindableAddress("*"), "*");
}

TEST(BindableAddress, ANameThatDoesNotResolveIsNamed) {
  try {
    bindableAddress("no-such-host.invalid");
    FAIL() << "an unresolvable name was bound";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-host.invalid'"), std::string::npos) << e.what();
  }
}

TEST(LocalAddressToward, LoopbackPeersAreReachedFromLoopback) {
  EXPECT_EQ(localAddressToward({"127.0.0.1", 9}), "127.0.0.1");
}

}  // namespace
}  // namespace tandem::cluster
