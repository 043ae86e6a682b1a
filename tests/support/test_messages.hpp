#pragma once
// A protocol of two messages for the transport's own tests, which know no
// store and no parameter server.
#include "net/frame.hpp"

namespace tandem::testing {

inline constexpr net::MessageType kAsk{16};
inline constexpr net::MessageType kAnswer{17};
inline constexpr net::MessageName kTestMessageNames[] = {{kAsk, "ask"}, {kAnswer, "answer"}};
inline constexpr net::MessageCatalog kTestMessages{kTestMessageNames};

}  // namespace tandem::testing
