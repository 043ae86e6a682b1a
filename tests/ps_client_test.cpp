// PsClient against a scripted ROUTER standing in for a server: send
// failures and timeouts complete tickets with named errors, timed-out
// requests leave the client, a ticket is waited on once, and a reply that
// is the request itself (a socket connected to itself) is rejected.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/deadline.hpp"
#include "core/error.hpp"
#include "net/frame.hpp"
#include "ps/client.hpp"
#include "ps/protocol.hpp"

namespace tandem::ps {
namespace {

using namespace std::chrono_literals;
using net::MessageType;

// A ROUTER that the test drives by hand.
class ScriptedServer {
 public:
  explicit ScriptedServer(int port = -1) : socket_(context_, zmq::socket_type::router) {
    net::configureSocket(socket_);
    socket_.bind(net::tcpEndpoint("127.0.0.1", port));
    const std::string bound = socket_.get(zmq::sockopt::last_endpoint);
    port_ = std::stoi(bound.substr(bound.rfind(':') + 1));
  }
  int port() const { return port_; }
  std::string endpoint() const { return net::tcpEndpoint("127.0.0.1", port_); }

  struct Request {
    std::string routing;
    net::Frame frame;
  };
  // The next request, or nullopt if none came within `budget`.
  std::optional<Request> receive(std::chrono::milliseconds budget = 2000ms) {
    const Deadline deadline = Deadline::after(budget);
    std::vector<zmq::message_t> parts;
    while (!deadline.expired()) {
      if (!net::waitReadable(socket_, deadline.remaining())) continue;
      const size_t total = net::receiveParts(socket_, parts, 3);
      if (total == 0) continue;
      Request r{std::string(static_cast<const char*>(parts[0].data()), parts[0].size()), {}};
      r.frame = net::decodeFrame(std::span(parts).subspan(1), total - 1, net::kMaxPayloadBytes, "the client");
      return r;
    }
    return std::nullopt;
  }
  void reply(const std::string& routing, net::FrameHeader header, const std::string& payload = "") {
    zmq::message_t id(routing.data(), routing.size());
    ASSERT_TRUE(net::sendFrame(socket_, header, net::copyPayload(payload), &id));
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
  int port_ = 0;
};

std::vector<ServerAddress> oneServer(const std::string& endpoint) { return {{endpoint, "ps 0"}}; }

net::FrameHeader pullHeader(uint64_t key) {
  return {.type = MessageType::kPsPull, .key_begin = key, .key_end = key + 1};
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds budget = 2000ms) {
  const Deadline deadline = Deadline::after(budget);
  while (!condition()) {
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::string peerErrorOf(Ticket& ticket, std::chrono::milliseconds budget, const std::string& what) {
  try {
    ticket.wait(Deadline::after(budget), what);
  } catch (const PeerError& e) {
    return e.what();
  }
  return "(no PeerError)";
}

TEST(PsClient, ARequestThatCannotBeSentFailsNamingTheServerAndLeavesTheClient) {
  // A TCP listener that never accepts: the connection never completes
  // ZeroMQ's handshake, so the request can never be handed over.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string endpoint = net::tcpEndpoint("127.0.0.1", ntohs(addr.sin_port));
  {
    PsClient client(oneServer(endpoint));
    Ticket ticket = client.send(0, {.type = MessageType::kPsHello}, net::copyPayload(encode(Hello{0, 1})));
    EXPECT_TRUE(eventually([&] { return client.inFlight() == 1; }));
    const std::string what = peerErrorOf(ticket, 150ms, "hello");
    EXPECT_NE(what.find("ps 0 did not answer hello"), std::string::npos) << what;
    EXPECT_NE(what.find("never sent"), std::string::npos) << what;
    EXPECT_NE(what.find(endpoint), std::string::npos) << what;
    EXPECT_TRUE(eventually([&] { return client.inFlight() == 0; })) << "the abandoned request stayed queued";
  }
  ::close(listener);
}

TEST(PsClient, ARequestSentBeforeItsServerIsUpIsDeliveredOnceItIs) {
  int port = 0;
  { port = ScriptedServer().port(); }  // a port that was free a moment ago
  PsClient client(oneServer(net::tcpEndpoint("127.0.0.1", port)));
  Ticket ticket = client.send(0, pullHeader(3), zmq::message_t());
  std::this_thread::sleep_for(100ms);
  ScriptedServer server(port);
  auto request = server.receive();
  ASSERT_TRUE(request.has_value()) << "the queued request never reached the server";
  EXPECT_EQ(request->frame.header.type, MessageType::kPsPull);
  server.reply(request->routing, {.type = MessageType::kPsValues, .request_id = request->frame.header.request_id});
  EXPECT_EQ(ticket.wait(Deadline::after(2000ms), "pull").header.type, MessageType::kPsValues);
}

TEST(PsClient, ATimedOutRequestLeavesTheClientAndItsLateReplyIsDropped) {
  ScriptedServer server;
  PsClient client(oneServer(server.endpoint()));
  Ticket slow = client.send(0, pullHeader(1), zmq::message_t());
  auto first = server.receive();
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(eventually([&] { return client.inFlight() == 1; }));
  const std::string what = peerErrorOf(slow, 50ms, "the pull of chunk 1");
  EXPECT_NE(what.find("ps 0 did not answer the pull of chunk 1"), std::string::npos) << what;
  EXPECT_TRUE(eventually([&] { return client.inFlight() == 0; })) << "the timed-out request stayed in flight";

  // Its reply comes after all, then the reply to a new request.
  server.reply(first->routing, {.type = MessageType::kPsValues, .request_id = first->frame.header.request_id}, "late");
  Ticket next = client.send(0, pullHeader(2), zmq::message_t());
  auto second = server.receive();
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->frame.header.request_id, first->frame.header.request_id);
  server.reply(second->routing, {.type = MessageType::kPsValues, .request_id = second->frame.header.request_id},
               "fresh");
  net::Frame reply = next.wait(Deadline::after(2000ms), "the pull of chunk 2");
  EXPECT_EQ(reply.text(), "fresh");
  EXPECT_TRUE(eventually([&] { return client.inFlight() == 0; }));
}

TEST(PsClient, ASecondWaitOnATicketIsALogicError) {
  ScriptedServer server;
  PsClient client(oneServer(server.endpoint()));
  Ticket answered = client.send(0, {.type = MessageType::kPsDone}, zmq::message_t());
  auto request = server.receive();
  ASSERT_TRUE(request.has_value());
  server.reply(request->routing, {.type = MessageType::kOk, .request_id = request->frame.header.request_id});
  EXPECT_EQ(answered.wait(Deadline::after(2000ms), "the goodbye").header.type, MessageType::kOk);
  EXPECT_THROW(answered.wait(Deadline::after(2000ms), "the goodbye"), std::logic_error);

  Ticket unanswered = client.send(0, pullHeader(0), zmq::message_t());
  EXPECT_THROW(unanswered.wait(Deadline::after(20ms), "a pull"), PeerError);
  EXPECT_THROW(unanswered.wait(Deadline::after(20ms), "a pull"), std::logic_error);
}

// What a DEALER connected to itself reads: its own request, id and all.
TEST(PsClient, OurOwnRequestReadBackIsRejectedNamingTheServerAddress) {
  ScriptedServer echo;
  PsClient client(oneServer(echo.endpoint()));
  Ticket ticket = client.send(0, {.type = MessageType::kPsClock, .clock = 4},
                              net::copyPayload(encode(StepReport{1.5, 0.2, false})));
  auto request = echo.receive();
  ASSERT_TRUE(request.has_value());
  const std::string payload(request->frame.text());
  echo.reply(request->routing, request->frame.header, payload);
  const std::string what = peerErrorOf(ticket, 2000ms, "the end of step 3");
  EXPECT_NE(what.find("received our own request back"), std::string::npos) << what;
  EXPECT_NE(what.find("connected to itself"), std::string::npos) << what;
  EXPECT_NE(what.find(echo.endpoint()), std::string::npos) << what;
}

TEST(PsClient, AReplyOfTheWrongTypeIsRejected) {
  ScriptedServer server;
  PsClient client(oneServer(server.endpoint()));
  Ticket ticket = client.send(0, pullHeader(5), zmq::message_t());
  auto request = server.receive();
  ASSERT_TRUE(request.has_value());
  server.reply(request->routing, {.type = MessageType::kOk, .request_id = request->frame.header.request_id});
  const std::string what = peerErrorOf(ticket, 2000ms, "the pull of chunk 5");
  EXPECT_NE(what.find("ps 0 answered the pull of chunk 5 (ps-pull) with ok, expected ps-values"), std::string::npos)
      << what;
}

TEST(PsProtocol, NoRequestIsAnsweredWithItsOwnType) {
  for (MessageType request : {MessageType::kPsHello, MessageType::kPsInit, MessageType::kPsSet, MessageType::kPsPush,
                              MessageType::kPsPull, MessageType::kPsClock, MessageType::kPsDone,
                              MessageType::kPsState}) {
    EXPECT_NE(replyTypeOf(request), request) << net::messageTypeName(request);
  }
  EXPECT_EQ(replyTypeOf(MessageType::kPsClock), MessageType::kPsAgreement);
}

}  // namespace
}  // namespace tandem::ps
