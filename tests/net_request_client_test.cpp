// RequestClient against a scripted ROUTER: a reply that is our own request
// (what a DEALER connected to itself reads) is rejected, naming the address.
#include <gtest/gtest.h>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/job_security.hpp"
#include "core/clock.hpp"
#include "core/deadline.hpp"
#include "core/error.hpp"
#include "net/frame.hpp"
#include "net/request_client.hpp"
#include "support/test_messages.hpp"
#include "support/test_security.hpp"

namespace tandem::net {
namespace {

using namespace std::chrono_literals;

// Answers every request once on its own thread: echoes the first back
// unchanged, answers the rest with testing::kAnswer.
class EchoThenAnswer {
 public:
  EchoThenAnswer() : socket_(context_, zmq::socket_type::router) {
    configureSocket(socket_);
    zap_ = secureServer(context_, socket_, "the echo server", tandem::testing::testSecurity());
    socket_.bind(tcpEndpoint("127.0.0.1", -1));
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { serve(); });
  }
  ~EchoThenAnswer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void serve() {
    std::vector<zmq::message_t> parts;
    int served = 0;
    while (!stop_) {
      if (!waitReadable(socket_, 20ms)) continue;
      const size_t total = receiveParts(socket_, parts, 3);
      if (total != 3) continue;
      Frame f = decodeFrame(std::span(parts).subspan(1), 2, kMaxPayloadBytes, "the client", testing::kTestMessages);
      FrameHeader h = f.header;
      if (served++ > 0) h.type = testing::kAnswer;
      sendFrame(socket_, h, copyPayload(f.text()), &parts[0]);
    }
  }

  zmq::context_t context_{1};
  std::unique_ptr<ZapHandler> zap_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(RequestClient, OurOwnRequestReadBackIsRejectedNamingTheAddress) {
  EchoThenAnswer server;
  zmq::context_t context(1);
  RequestClient client(context, server.endpoint(), "the coordinator", testing::kTestMessages, tandem::testing::testSecurity());
  try {
    client.request({.type = testing::kAsk}, copyPayload("key"), Deadline::after(2000ms));
    ADD_FAILURE() << "our own ask was taken for the answer";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the coordinator: received our own request back (ask)"), std::string::npos) << what;
    EXPECT_NE(what.find("the socket connected to itself at " + server.endpoint()), std::string::npos) << what;
  }
  // The client starts afresh, and a real answer is taken.
  auto reply = client.request({.type = testing::kAsk}, copyPayload("key"), Deadline::after(2000ms));
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->header.type, testing::kAnswer);
  EXPECT_EQ(reply->text(), "key");
}

TEST(RequestClient, AServerThatExitsBeforeAnsweringIsNamedAtOnce) {
  zmq::context_t server_context(1);
  std::optional<zmq::socket_t> server(std::in_place, server_context, zmq::socket_type::router);
  configureSocket(*server);
  auto zap = secureServer(server_context, *server, "the test server", tandem::testing::testSecurity());
  server->bind(tcpEndpoint("127.0.0.1", -1));
  const std::string endpoint = server->get(zmq::sockopt::last_endpoint);
  zmq::context_t context(1);
  RequestClient client(context, endpoint, "the coordinator", testing::kTestMessages, tandem::testing::testSecurity());
  auto asked = std::async(std::launch::async, [&] {
    return client.request({.type = testing::kAsk}, copyPayload("key"), Deadline::after(60'000ms));
  });
  std::vector<zmq::message_t> parts;
  ASSERT_TRUE(waitReadable(*server, 2000ms));
  ASSERT_EQ(receiveParts(*server, parts, 3), 3u);
  const auto closed = Clock::now();
  server.reset();  // exits without answering
  try {
    asked.get();
    ADD_FAILURE() << "a request to a server that went away returned";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the coordinator (" + endpoint + ") dropped the connection before answering ask"),
              std::string::npos)
        << what;
  }
  EXPECT_LT(Clock::now() - closed, 1000ms) << "waited for the deadline instead";
}

}  // namespace
}  // namespace tandem::net
