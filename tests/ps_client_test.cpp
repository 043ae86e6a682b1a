// PsClient against a scripted ROUTER standing in for a server: send
// failures and timeouts complete tickets with named errors, timed-out
// requests leave the client, a ticket is waited on once, and a reply that
// is the request itself (a socket connected to itself) is rejected.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/job_security.hpp"
#include "core/clock.hpp"
#include "core/deadline.hpp"
#include "core/error.hpp"
#include "core/patient_wait.hpp"
#include "core/stop_request.hpp"
#include "net/frame.hpp"
#include "ps/client.hpp"
#include "ps/messages.hpp"
#include "ps/protocol.hpp"
#include "support/freezable_proxy.hpp"
#include "support/test_security.hpp"

namespace tandem::ps {
namespace {

using namespace std::chrono_literals;
using net::MessageType;

// A ROUTER that the test drives by hand.
class ScriptedServer {
 public:
  explicit ScriptedServer(int port = -1, const net::JobSecurity& security = tandem::testing::testSecurity())
      : socket_(context_, zmq::socket_type::router) {
    net::configureSocket(socket_);
    zap_ = net::secureServer(context_, socket_, "the scripted server", security);
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
      r.frame = net::decodeFrame(std::span(parts).subspan(1), total - 1, net::kMaxPayloadBytes, "the client", ps::kMessages);
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
  std::unique_ptr<net::ZapHandler> zap_;
  zmq::socket_t socket_;
  int port_ = 0;
};

std::vector<ServerAddress> oneServer(const std::string& endpoint) { return {{endpoint, "ps 0"}}; }

net::FrameHeader pullHeader(uint64_t key) {
  return {.type = ps::msg::kPull, .key_begin = key, .key_end = key + 1};
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

// A TCP socket bound to a free loopback port, listening if asked: its
// descriptor (-1 on failure) and the port.
std::pair<int, int> loopbackSocket(bool listen) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || (listen && ::listen(fd, 4) != 0) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return {-1, 0};
  }
  return {fd, ntohs(addr.sin_port)};
}

TEST(PsClient, ARequestThatCannotBeSentFailsNamingTheServerAndLeavesTheClient) {
  // A TCP listener that never accepts: the connection never completes
  // ZeroMQ's handshake, so the request can never be handed over.
  const auto [listener, port] = loopbackSocket(/*listen=*/true);
  ASSERT_GE(listener, 0);
  const std::string endpoint = net::tcpEndpoint("127.0.0.1", port);
  {
    PsClient client(oneServer(endpoint), tandem::testing::testSecurity());
    Ticket ticket = client.send(0, {.type = ps::msg::kHello}, net::copyPayload(encode(Hello{0, 1})));
    EXPECT_TRUE(eventually([&] { return client.inFlight() == 1; }));
    const std::string what = peerErrorOf(ticket, 150ms, "hello");
    EXPECT_NE(what.find("ps 0 did not answer hello"), std::string::npos) << what;
    EXPECT_NE(what.find("never sent"), std::string::npos) << what;
    EXPECT_NE(what.find(endpoint), std::string::npos) << what;
    EXPECT_TRUE(eventually([&] { return client.inFlight() == 0; })) << "the abandoned request stayed queued";
  }
  ::close(listener);
}

// A server known to have been up (Liveness::seen_up: a server's link to the
// other holder it forwards to) whose port refuses: it died, and its
// requests fail at once instead of waiting for a connection for good.
TEST(PsClient, AServerSeenUpThatRefusesTheConnectionIsLostAtOnce) {
  const auto [probe, port] = loopbackSocket(/*listen=*/false);
  ASSERT_GE(probe, 0);
  ::close(probe);  // nothing listens there now
  const std::string endpoint = net::tcpEndpoint("127.0.0.1", port);
  PsClient client(oneServer(endpoint), tandem::testing::testSecurity(), net::kMaxPayloadBytes,
                  Liveness{.seen_up = true});
  Ticket ticket = client.send(0, pullHeader(0), zmq::message_t());
  const std::string what = peerErrorOf(ticket, 30'000ms, "the pull of chunk 0");
  EXPECT_NE(what.find("refused or timed out the connection"), std::string::npos) << what;
  EXPECT_TRUE(client.lost(0));
}

TEST(PsClient, ARequestSentBeforeItsServerIsUpIsDeliveredOnceItIs) {
  int port = 0;
  { port = ScriptedServer().port(); }  // a port that was free a moment ago
  PsClient client(oneServer(net::tcpEndpoint("127.0.0.1", port)), tandem::testing::testSecurity());
  Ticket ticket = client.send(0, pullHeader(3), zmq::message_t());
  std::this_thread::sleep_for(100ms);
  ScriptedServer server(port);
  auto request = server.receive();
  ASSERT_TRUE(request.has_value()) << "the queued request never reached the server";
  EXPECT_EQ(request->frame.header.type, ps::msg::kPull);
  server.reply(request->routing, {.type = ps::msg::kValues, .request_id = request->frame.header.request_id});
  EXPECT_EQ(ticket.wait(Deadline::after(2000ms), "pull").header.type, ps::msg::kValues);
}

TEST(PsClient, ATimedOutRequestLeavesTheClientAndItsLateReplyIsDropped) {
  ScriptedServer server;
  PsClient client(oneServer(server.endpoint()), tandem::testing::testSecurity());
  Ticket slow = client.send(0, pullHeader(1), zmq::message_t());
  auto first = server.receive();
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(eventually([&] { return client.inFlight() == 1; }));
  const std::string what = peerErrorOf(slow, 50ms, "the pull of chunk 1");
  EXPECT_NE(what.find("ps 0 did not answer the pull of chunk 1"), std::string::npos) << what;
  EXPECT_TRUE(eventually([&] { return client.inFlight() == 0; })) << "the timed-out request stayed in flight";

  // Its reply comes after all, then the reply to a new request.
  server.reply(first->routing, {.type = ps::msg::kValues, .request_id = first->frame.header.request_id}, "late");
  Ticket next = client.send(0, pullHeader(2), zmq::message_t());
  auto second = server.receive();
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->frame.header.request_id, first->frame.header.request_id);
  server.reply(second->routing, {.type = ps::msg::kValues, .request_id = second->frame.header.request_id},
               "fresh");
  net::Frame reply = next.wait(Deadline::after(2000ms), "the pull of chunk 2");
  EXPECT_EQ(reply.text(), "fresh");
  EXPECT_TRUE(eventually([&] { return client.inFlight() == 0; }));
}

TEST(PsClient, ASecondWaitOnATicketIsALogicError) {
  ScriptedServer server;
  PsClient client(oneServer(server.endpoint()), tandem::testing::testSecurity());
  Ticket answered = client.send(0, {.type = ps::msg::kDone}, zmq::message_t());
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
  PsClient client(oneServer(echo.endpoint()), tandem::testing::testSecurity());
  Ticket ticket = client.send(0, {.type = ps::msg::kClock, .clock = 4},
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
  PsClient client(oneServer(server.endpoint()), tandem::testing::testSecurity());
  Ticket ticket = client.send(0, pullHeader(5), zmq::message_t());
  auto request = server.receive();
  ASSERT_TRUE(request.has_value());
  server.reply(request->routing, {.type = MessageType::kOk, .request_id = request->frame.header.request_id});
  const std::string what = peerErrorOf(ticket, 2000ms, "the pull of chunk 5");
  EXPECT_NE(what.find("ps 0 answered the pull of chunk 5 (ps-pull) with ok, expected ps-values"), std::string::npos)
      << what;
}

// Answers request `request` of `server` with msg::kValues.
void answer(ScriptedServer& server, const ScriptedServer::Request& request) {
  server.reply(request.routing, {.type = ps::msg::kValues, .request_id = request.frame.header.request_id});
}

TEST(PsClient, AServerThatExitsFailsItsRequestsAtOnceAndIsNeverAskedAgain) {
  std::optional<ScriptedServer> server(std::in_place);
  const int port = server->port();
  const std::string endpoint = server->endpoint();
  PsClient client(oneServer(endpoint), tandem::testing::testSecurity());
  Ticket first = client.send(0, pullHeader(0), zmq::message_t());
  auto request = server->receive();
  ASSERT_TRUE(request.has_value());
  answer(*server, *request);
  first.wait(Deadline::after(2000ms), "the pull of chunk 0");

  Ticket pending = client.send(0, pullHeader(1), zmq::message_t());
  ASSERT_TRUE(server->receive().has_value());
  const auto closed = Clock::now();
  server.reset();  // its kernel closes the connection, as for a killed process
  const std::string what = peerErrorOf(pending, 60'000ms, "the pull of chunk 1");
  EXPECT_LT(Clock::now() - closed, 1000ms) << "waited for the deadline instead: " << what;
  EXPECT_NE(what.find("ps 0: the connection to " + endpoint + " was lost"), std::string::npos) << what;
  EXPECT_NE(what.find("the pull of chunk 1"), std::string::npos) << what;
  EXPECT_TRUE(eventually([&] { return client.inFlight() == 0; }));

  // Whatever listens there next is never sent the old request or a new one.
  ScriptedServer back(port);
  Ticket later = client.send(0, pullHeader(2), zmq::message_t());
  const std::string again = peerErrorOf(later, 2000ms, "the pull of chunk 2");
  EXPECT_NE(again.find("was lost"), std::string::npos) << again;
  EXPECT_FALSE(back.receive(500ms).has_value()) << "a request reached the server that came back";
}

// The server answers one pull, then exits; the client sees it lost.
void answerOnceThenExit(PsClient& client, std::optional<ScriptedServer>& server) {
  Ticket first = client.send(0, pullHeader(0), zmq::message_t());
  auto request = server->receive();
  ASSERT_TRUE(request.has_value());
  answer(*server, *request);
  first.wait(Deadline::after(2000ms), "the pull of chunk 0");
  server.reset();
  ASSERT_TRUE(eventually([&] { return client.lost(0); }));
}

// A replacement at a lost server's address is asked nothing until the
// caller revives the server: then only what is sent after the revival
// reaches it, over a connection of its own, and its loss is seen again.
TEST(PsClient, ARevivedServerGetsOnlyWhatIsSentAfterTheRevival) {
  std::optional<ScriptedServer> server(std::in_place);
  const int port = server->port();
  PsClient client(oneServer(server->endpoint()), tandem::testing::testSecurity());
  ASSERT_NO_FATAL_FAILURE(answerOnceThenExit(client, server));

  std::optional<ScriptedServer> replacement(std::in_place, port);
  Ticket before = client.send(0, pullHeader(1), zmq::message_t());
  EXPECT_NE(peerErrorOf(before, 2000ms, "the pull of chunk 1").find("was lost"), std::string::npos);
  client.revive(0);
  EXPECT_FALSE(client.lost(0));
  Ticket after = client.send(0, pullHeader(2), zmq::message_t());
  EXPECT_FALSE(after.ready());
  auto revived = replacement->receive();
  ASSERT_TRUE(revived.has_value());
  EXPECT_EQ(revived->frame.header.key_begin, 2u) << "the request sent before the revival reached the replacement";
  answer(*replacement, *revived);
  EXPECT_TRUE(eventually([&] { return after.ready(); }));
  EXPECT_EQ(after.wait(Deadline::after(2000ms), "the pull of chunk 2").header.type, msg::kValues);
  EXPECT_FALSE(after.ready()) << "an outcome handed out is no longer ready";
  EXPECT_THROW(client.revive(0), Error) << "only a lost server is revived";

  replacement.reset();
  EXPECT_TRUE(eventually([&] { return client.lost(0); })) << "the replacement's loss is seen like the first";
}

// A replacement that exits before it is set up: a request to its revived
// address fails as soon as the connection there is refused, not at its
// deadline, and a later replacement there is taken back as the first was.
TEST(PsClient, ARevivedServerThatRefusesTheConnectionIsLostAtOnce) {
  std::optional<ScriptedServer> server(std::in_place);
  const int port = server->port();
  PsClient client(oneServer(server->endpoint()), tandem::testing::testSecurity(), net::kMaxPayloadBytes,
                  Liveness{100ms, 500ms});
  ASSERT_NO_FATAL_FAILURE(answerOnceThenExit(client, server));

  client.revive(0);  // nothing listens there
  const auto revived = Clock::now();
  Ticket unanswered = client.send(0, pullHeader(1), zmq::message_t());
  const std::string what = peerErrorOf(unanswered, 60'000ms, "the pull of chunk 1");
  EXPECT_LT(Clock::now() - revived, 3000ms) << what;
  const std::string refused = " refused or timed out the connection, though it was up before";
  EXPECT_NE(what.find(net::tcpEndpoint("127.0.0.1", port) + refused),
            std::string::npos)
      << what;
  EXPECT_TRUE(client.lost(0));

  ScriptedServer replacement(port);
  client.revive(0);
  Ticket after = client.send(0, pullHeader(2), zmq::message_t());
  auto taken = replacement.receive();
  ASSERT_TRUE(taken.has_value());
  answer(replacement, *taken);
  EXPECT_EQ(after.wait(Deadline::after(2000ms), "the pull of chunk 2").header.type, msg::kValues);
  // A link that came up is judged by its heartbeats from then on, not by the revival.
  std::this_thread::sleep_for(800ms);
  EXPECT_FALSE(client.lost(0));
}

TEST(PsClient, AServerWhoseHostFallsSilentIsNamedAfterTheHeartbeatTimeout) {
  ScriptedServer server;
  tandem::testing::FreezableProxy proxy(server.port());
  PsClient client(oneServer(proxy.endpoint()), tandem::testing::testSecurity(), net::kMaxPayloadBytes, Liveness{100ms, 500ms});
  Ticket first = client.send(0, pullHeader(0), zmq::message_t());
  auto request = server.receive();
  ASSERT_TRUE(request.has_value());
  answer(server, *request);
  first.wait(Deadline::after(2000ms), "the pull of chunk 0");

  // Alive but idle: the heartbeats keep the link, longer than the timeout.
  std::this_thread::sleep_for(1200ms);
  Ticket second = client.send(0, pullHeader(1), zmq::message_t());
  request = server.receive();
  ASSERT_TRUE(request.has_value()) << "an idle, healthy link was dropped";
  answer(server, *request);
  second.wait(Deadline::after(2000ms), "the pull of chunk 1");

  Ticket pending = client.send(0, pullHeader(2), zmq::message_t());
  ASSERT_TRUE(server.receive().has_value());
  const auto frozen = Clock::now();
  proxy.freeze();
  const std::string what = peerErrorOf(pending, 60'000ms, "the pull of chunk 2");
  const auto waited = Clock::now() - frozen;
  EXPECT_GE(waited, 400ms) << what;
  EXPECT_LT(waited, 3000ms) << what;
  EXPECT_NE(what.find("answered no heartbeat for 500ms"), std::string::npos) << what;
}

TEST(PsClient, AStopRequestEndsAWaitOnASilentServerAfterTheGrace) {
  ScriptedServer server;
  PsClient client(oneServer(server.endpoint()), tandem::testing::testSecurity());
  Ticket ticket = client.send(0, pullHeader(0), zmq::message_t());
  ASSERT_TRUE(server.receive().has_value());
  struct ClearStop {
    ~ClearStop() { stopFlag() = false; }
  } clear;
  stopFlag() = true;
  const auto asked = Clock::now();
  std::string what = "(no Interrupted)";
  try {
    ticket.wait(Deadline::after(60'000ms), "the pull of chunk 0");
  } catch (const Interrupted& e) {
    what = e.what();
  }
  const auto waited = Clock::now() - asked;
  EXPECT_NE(what.find("stopped by a signal while waiting for ps 0 to answer the pull of chunk 0"), std::string::npos)
      << what;
  EXPECT_GE(waited, kStopGrace - 50ms);
  EXPECT_LT(waited, kStopGrace + 1000ms);
}

TEST(PsClient, AServerOfAnotherJobRefusesTheHandshakeAtOnce) {
  ScriptedServer theirs(-1, net::JobSecurity::withKeys(net::generateJobKeys()));  // another job's
  PsClient client(oneServer(theirs.endpoint()), tandem::testing::testSecurity());
  Ticket hello = client.send(0, {.type = ps::msg::kHello}, net::copyPayload(encode(Hello{0, 1})));
  const auto sent = Clock::now();
  const std::string what = peerErrorOf(hello, 60'000ms, "hello");
  EXPECT_LT(Clock::now() - sent, 2000ms) << "waited for the deadline instead: " << what;
  EXPECT_NE(what.find("ps 0: refused this task's handshake at " + theirs.endpoint()), std::string::npos) << what;
  EXPECT_NE(what.find("different job secrets"), std::string::npos) << what;
  EXPECT_FALSE(theirs.receive(300ms).has_value()) << "the request reached the other job's server";
}

TEST(PsProtocol, NoRequestIsAnsweredWithItsOwnType) {
  for (MessageType request : {ps::msg::kHello, ps::msg::kInit, ps::msg::kSet, ps::msg::kPush,
                              ps::msg::kPull, ps::msg::kClock, ps::msg::kDone,
                              ps::msg::kState}) {
    EXPECT_NE(replyTypeOf(request), request) << ps::kMessages.nameOf(request);
  }
  EXPECT_EQ(replyTypeOf(ps::msg::kClock), ps::msg::kAgreement);
}

}  // namespace
}  // namespace tandem::ps
