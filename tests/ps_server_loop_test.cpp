// ParameterServer's I/O loop: an apply that throws stops serve() with an
// error naming the chunk, and a flood of requests does not starve the
// timeout checks.
#include <gtest/gtest.h>

#include "core/logging.hpp"
#include "ps/messages.hpp"
#include "support/ps_server_harness.hpp"
#include "support/test_security.hpp"

namespace tandem::ps::testing {
namespace {

TEST_F(PsServer, AFailedApplyStopsServeNamingTheChunk) {
  ServerOptions options;
  options.apply_fault = [](uint64_t key, uint64_t update) {
    if (key == 1) throw std::runtime_error("injected fault in update " + std::to_string(update));
  };
  start(makeConfig(Mode::PsSync, 1, {{0, 4}, {1, 4}}), options);
  Peer w0 = worker(0);
  expectOk(w0.await(push(w0, 0, 0, pattern(4, 0.1f, 0.0f))));
  expectOk(w0.await(push(w0, 1, 0, pattern(4, 0.1f, 0.0f))));
  const auto started = Clock::now();
  try {
    server_->summary(2000ms);
    ADD_FAILURE() << "serve() returned although an apply failed";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ps 0: sync apply of chunk 1 for step 0 failed: injected fault in update 0"),
              std::string::npos)
        << what;
  }
  EXPECT_LT(Clock::now() - started, 1500ms) << "the failure was not noticed promptly";
}

// Handling a queued flood in one go would run no timeout check until it is
// all done. The server gets a startup timeout of 0, so its first check
// throws: it must come after a bounded batch, with most of the flood unread.
TEST(PsServerLoop, AFloodOfRequestsDoesNotStarveTimeoutChecks) {
  constexpr int kFlood = 200'000;
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::err);  // one warning per refused request otherwise
  struct Restore {
    spdlog::level::level_enum level;
    ~Restore() { spdlog::set_level(level); }
  } restore{level};

  ParameterServer server({.bind_host = "127.0.0.1", .startup_timeout_s = 0}, tandem::testing::testSecurity());
  zmq::context_t context(1);
  zmq::socket_t flood(context, zmq::socket_type::dealer);
  net::configureSocket(flood);
  net::secureClient(flood, tandem::testing::testSecurity());
  flood.set(zmq::sockopt::sndhwm, 0);
  flood.set(zmq::sockopt::rcvhwm, 0);
  flood.connect(net::tcpEndpoint("127.0.0.1", server.port()));
  for (int i = 0; i < kFlood; ++i) {
    // Before init every pull is refused: each one costs the server a reply.
    ASSERT_TRUE(net::sendFrame(flood, header(ps::msg::kPull, 0, 0), zmq::message_t()));
  }
  std::this_thread::sleep_for(500ms);  // let ZeroMQ move it all into the server's queue

  EXPECT_THROW(server.serve(), PeerError);
  // The server is still alive, so every reply it sent can be read.
  int replies = 0;
  std::vector<zmq::message_t> parts;
  while (net::waitReadable(flood, 300ms)) {
    while (net::receiveParts(flood, parts, 2) != 0) ++replies;
  }
  EXPECT_GT(replies, 0);
  EXPECT_LT(replies, kFlood / 2) << "serve() read the whole flood before checking its startup deadline";
}

}  // namespace
}  // namespace tandem::ps::testing
