#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <thread>

#include "cluster/coordinator.hpp"
#include "cluster/quorum_link.hpp"
#include "cluster/store_messages.hpp"
#include "core/error.hpp"
#include "net/job_security.hpp"
#include "net/frame.hpp"
#include "net/wire.hpp"
#include "support/test_security.hpp"

namespace tandem::cluster {
namespace {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char>& v) { return {v.begin(), v.end()}; }

HostPort local(int port) { return {"127.0.0.1", port}; }

// A port nobody listens on right now: bound and released by a server.
int freePort() {
  CoordinatorServer probe("127.0.0.1", 0, tandem::testing::testSecurity());
  return probe.port();
}

template <class F>
Ms timeOf(F&& f) {
  auto start = Clock::now();
  f();
  return std::chrono::duration_cast<Ms>(Clock::now() - start);
}

TEST(Coordinator, PicksAPortAndServesSetAndGet) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  ASSERT_GT(server.port(), 0);
  CoordinatorClient client(local(server.port()), 2000ms, tandem::testing::testSecurity());
  client.set("alpha", bytes("one"));
  EXPECT_EQ(text(client.get("alpha")), "one");
  client.set("alpha", bytes("two"));  // overwrite
  EXPECT_EQ(text(client.get("alpha")), "two");
  client.set("empty", {});
  EXPECT_TRUE(client.get("empty").empty());
  EXPECT_FALSE(client.tryGet("missing").has_value());
  EXPECT_EQ(text(*client.tryGet("alpha")), "two");
  EXPECT_EQ(client.missingKeys({"alpha", "x", "empty", "y"}, Deadline::after(1000ms)),
            (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(client.missingKeys({"alpha"}, Deadline::after(1000ms)).empty());
}

TEST(Coordinator, ReachableByHostName) {
  // "localhost" must reach an IPv4 listener even where it also resolves to ::1.
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client({"localhost", server.port()}, 2000ms, tandem::testing::testSecurity());
  client.set("k", bytes("v"));
  EXPECT_EQ(text(client.get("k")), "v");
}

TEST(Coordinator, ServesOverIpv6) {
  std::unique_ptr<CoordinatorServer> server;
  try {
    server = std::make_unique<CoordinatorServer>("::1", 0, tandem::testing::testSecurity());
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  CoordinatorClient client({"::1", server->port()}, 2000ms, tandem::testing::testSecurity());
  client.set("k", bytes("v6"));
  EXPECT_EQ(text(client.get("k")), "v6");
}

TEST(Coordinator, CarriesLargeBinaryValues) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client(local(server.port()), 5000ms, tandem::testing::testSecurity());
  std::vector<char> value(3 << 20);
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 31 + 7);
  value[5] = '\0';
  client.set("blob", value);
  EXPECT_EQ(client.get("blob"), value);
}

// A member cannot grow the chief without bound: values over the per-value
// cap are refused before sending, and the total is capped by the server.
TEST(Coordinator, TheStoreIsBounded) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client(local(server.port()), 5000ms, tandem::testing::testSecurity());
  EXPECT_THROW(client.set("huge", std::vector<char>(kMaxStoreValueBytes + 1)), InputError);
  const std::vector<char> value(kMaxStoreValueBytes);
  const size_t fits = kMaxStoreBytes / (value.size() + 8);
  for (size_t i = 0; i < fits; ++i) client.set(fmt::format("v{:06}", i), value);
  try {
    client.set("one-too-many", value);
    ADD_FAILURE() << "the store took more than " << kMaxStoreBytes << " bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the store is full"), std::string::npos) << e.what();
  }
  // Overwriting in place still works, and so does reading.
  client.set("v000000", std::vector<char>(4, 'x'));
  EXPECT_EQ(client.get("v000000"), std::vector<char>(4, 'x'));
}

TEST(Coordinator, RejectsBadKeysLocally) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client(local(server.port()), 1000ms, tandem::testing::testSecurity());
  EXPECT_THROW(client.set("", bytes("x")), InputError);
  EXPECT_THROW(client.set(std::string(5000, 'k'), bytes("x")), InputError);
}

TEST(Coordinator, ServesClientsOnManyThreads) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(kThreads);
  std::atomic<int> checked{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        CoordinatorClient client(local(server.port()), 5000ms, tandem::testing::testSecurity());
        for (int i = 0; i < 20; ++i) client.set(fmt::format("t{}/k{}", t, i), bytes(fmt::format("{}:{}", t, i)));
        // Reads block until the other threads' writes land.
        for (int other = 0; other < kThreads; ++other) {
          for (int i = 0; i < 20; ++i) {
            if (text(client.get(fmt::format("t{}/k{}", other, i))) == fmt::format("{}:{}", other, i)) ++checked;
          }
        }
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  EXPECT_EQ(checked.load(), kThreads * kThreads * 20);
}

TEST(Coordinator, WaitReturnsOnceKeysAppear) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient waiter(local(server.port()), 3000ms, tandem::testing::testSecurity());
  std::thread writer([&] {
    CoordinatorClient client(local(server.port()), 3000ms, tandem::testing::testSecurity());
    std::this_thread::sleep_for(100ms);
    client.set("a", bytes("1"));
    std::this_thread::sleep_for(50ms);
    client.set("b", bytes("2"));
  });
  auto took = timeOf([&] { waiter.wait({"a", "b"}, waiter.timeout()); });
  writer.join();
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 2000ms);
  EXPECT_EQ(text(waiter.get("b")), "2");
}

TEST(Coordinator, GetOfMissingKeyTimesOutNamingTheKey) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client(local(server.port()), 300ms, tandem::testing::testSecurity());
  auto start = Clock::now();
  try {
    client.get("never/set");
    FAIL() << "no throw";
  } catch (const PeerError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("key 'never/set' did not appear within 300ms"), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("127.0.0.1:{}", server.port())), std::string::npos) << what;
  }
  auto took = Clock::now() - start;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 800ms);
}

TEST(Coordinator, WaitWithTimeoutNamesEveryMissingKey) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client(local(server.port()), 10000ms, tandem::testing::testSecurity());
  client.set("here", bytes("x"));
  auto start = Clock::now();
  try {
    client.wait({"here", "gone1", "gone2"}, 250ms);
    FAIL() << "no throw";
  } catch (const PeerError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("keys 'gone1', 'gone2' did not appear within 250ms"), std::string::npos) << what;
  }
  // The explicit timeout wins over the client's 10 s.
  EXPECT_LT(Clock::now() - start, 1000ms);
}

TEST(Coordinator, ClientWithoutServerTimesOutNamingTheAddress) {
  int port = freePort();
  CoordinatorClient client(local(port), 300ms, tandem::testing::testSecurity());  // connecting itself never fails
  auto start = Clock::now();
  try {
    client.set("k", bytes("v"));
    FAIL() << "no throw";
  } catch (const PeerError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(fmt::format("coordinator (worker 0) at 127.0.0.1:{} did not answer within 300ms", port)),
              std::string::npos)
        << what;
  }
  auto took = Clock::now() - start;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 800ms);
  EXPECT_THROW(client.get("k"), PeerError);
  EXPECT_THROW(client.wait({"k"}, client.timeout()), PeerError);
}

TEST(Coordinator, ClientMayStartBeforeTheServer) {
  int port = freePort();
  CoordinatorClient client(local(port), 3000ms, tandem::testing::testSecurity());
  // The first attempt is abandoned; a late server must not answer a new
  // request with the stale reply.
  CoordinatorClient impatient(local(port), 100ms, tandem::testing::testSecurity());
  EXPECT_THROW(impatient.set("early", bytes("x")), PeerError);
  std::unique_ptr<CoordinatorServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    server = std::make_unique<CoordinatorServer>("127.0.0.1", port, tandem::testing::testSecurity());
  });
  client.set("k", bytes("v"));  // queued until the server is up
  starter.join();
  EXPECT_EQ(text(client.get("k")), "v");
  EXPECT_FALSE(impatient.tryGet("early").has_value());  // the abandoned set was dropped
  impatient.set("late", bytes("y"));
  EXPECT_EQ(text(impatient.get("late")), "y");
}

TEST(Coordinator, BindConflictNamesTheAddress) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  try {
    CoordinatorServer second("127.0.0.1", server.port(), tandem::testing::testSecurity());
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("tcp://127.0.0.1:{}", server.port())), std::string::npos)
        << e.what();
  }
}

TEST(Coordinator, DestructionIsPrompt) {
  auto server = std::make_unique<CoordinatorServer>("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client(local(server->port()), 1000ms, tandem::testing::testSecurity());
  client.set("k", bytes("v"));
  auto took = timeOf([&] { server.reset(); });
  EXPECT_LT(took, 300ms);
}

// A raw DEALER speaking garbage gets an error reply; the server keeps
// serving well-behaved clients.
TEST(Coordinator, GarbageFramesGetErrorRepliesAndServingContinues) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  net::configureSocket(raw);
  net::secureClient(raw, tandem::testing::testSecurity());  // a member of the job sending garbage
  raw.connect(fmt::format("tcp://127.0.0.1:{}", server.port()));

  auto exchange = [&](std::vector<zmq::message_t> parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
      raw.send(parts[i], i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    EXPECT_TRUE(net::waitReadable(raw, 3000ms));
    std::vector<zmq::message_t> reply;
    size_t total = net::receiveParts(raw, reply, 2);
    EXPECT_EQ(total, 2u);
    return net::decodeFrame(reply, total, net::kMaxPayloadBytes, "coordinator", cluster::kStoreMessages);
  };

  std::vector<zmq::message_t> junk;
  junk.emplace_back("hello", 5);
  net::Frame r1 = exchange(std::move(junk));
  EXPECT_EQ(r1.header.type, net::MessageType::kError);
  EXPECT_NE(r1.text().find("bad magic"), std::string_view::npos) << r1.text();

  // A well-formed header from a newer build: the error names the version
  // and is addressed to the request that caused it.
  net::FrameHeader h;
  h.type = cluster::store_msg::kGet;
  h.request_id = 77;
  h.payload_bytes = 1;
  auto head = net::encodeHeader(h);
  head[4] = std::byte{9};
  std::vector<zmq::message_t> future;
  future.emplace_back(head.data(), head.size());
  future.emplace_back("k", 1);
  net::Frame r2 = exchange(std::move(future));
  EXPECT_EQ(r2.header.type, net::MessageType::kError);
  EXPECT_EQ(r2.header.request_id, 77u);
  EXPECT_NE(r2.text().find("unsupported version 9"), std::string_view::npos) << r2.text();

  // Lying inner length in a set.
  h.type = cluster::store_msg::kSet;
  h.request_id = 78;
  h.payload_bytes = 6;
  head = net::encodeHeader(h);
  std::vector<zmq::message_t> lying;
  lying.emplace_back(head.data(), head.size());
  lying.emplace_back("\xff\xff\x00\x00" "ab", 6);  // claims a 65535-byte key
  net::Frame r3 = exchange(std::move(lying));
  EXPECT_EQ(r3.header.type, net::MessageType::kError);
  EXPECT_EQ(r3.header.request_id, 78u);
  EXPECT_NE(r3.text().find("truncated at key: needs 65535 bytes, 2 left"), std::string_view::npos) << r3.text();

  // A reply type sent as a request.
  h.type = cluster::store_msg::kValue;
  h.payload_bytes = 0;
  head = net::encodeHeader(h);
  std::vector<zmq::message_t> wrong;
  wrong.emplace_back(head.data(), head.size());
  wrong.emplace_back();
  net::Frame r4 = exchange(std::move(wrong));
  EXPECT_NE(r4.text().find("not a request the coordinator serves"), std::string_view::npos) << r4.text();

  // Three parts.
  h.type = cluster::store_msg::kGet;
  h.payload_bytes = 1;
  head = net::encodeHeader(h);
  std::vector<zmq::message_t> extra;
  extra.emplace_back(head.data(), head.size());
  extra.emplace_back("k", 1);
  extra.emplace_back("z", 1);
  net::Frame r5 = exchange(std::move(extra));
  EXPECT_NE(r5.text().find("expected 2 message parts"), std::string_view::npos) << r5.text();

  CoordinatorClient client(local(server.port()), 2000ms, tandem::testing::testSecurity());
  client.set("still", bytes("serving"));
  EXPECT_EQ(text(client.get("still")), "serving");
}

// Outsiders with the coordinator's address but not the job secret (none at
// all, or another job's) can neither read nor write the store.
TEST(Coordinator, OutsidersCanNeitherReadNorWriteTheStore) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient member(local(server.port()), 2000ms, tandem::testing::testSecurity());
  member.set("train/join/worker/0", bytes("chief"));
  const std::string endpoint = fmt::format("tcp://127.0.0.1:{}", server.port());
  const net::JobSecurity other_job = net::JobSecurity::withKeys(net::generateJobKeys());
  for (const bool with_curve : {false, true}) {
    zmq::context_t ctx(1);
    zmq::socket_t outsider(ctx, zmq::socket_type::dealer);
    net::configureSocket(outsider);
    if (with_curve) net::secureClient(outsider, other_job);
    outsider.connect(endpoint);
    // A set that would claim worker 1's place, then a get of the chief's record.
    net::FrameHeader set{.type = cluster::store_msg::kSet, .request_id = 1};
    net::FrameHeader get{.type = cluster::store_msg::kGet, .request_id = 2};
    net::PayloadWriter claim;
    claim.putString("train/join/worker/1");
    claim.putRaw("x", 1);
    EXPECT_TRUE(net::sendFrame(outsider, set, net::copyPayload(claim.bytes())));
    EXPECT_TRUE(net::sendFrame(outsider, get, net::copyPayload(std::string_view("train/join/worker/0"))));
    EXPECT_FALSE(net::waitReadable(outsider, 700ms)) << "an outsider got a reply (curve: " << with_curve << ")";
  }
  EXPECT_FALSE(member.tryGet("train/join/worker/1").has_value()) << "an outsider wrote the store";
  EXPECT_EQ(text(member.get("train/join/worker/0")), "chief");
}

// Collectives rendezvous through the store: collective_communicator_test
// (CommunicatorConnect.RendezvousThroughTheCoordinatorStore).

}  // namespace
}  // namespace tandem::cluster

namespace tandem::cluster {
namespace {

// The quorum over real sockets: heartbeats on their own clients, a silent
// worker taken for dead, the survivors' arrivals forming the next
// generation, and every reply decoded from the wire.
TEST(CoordinatorQuorum, SurvivorsOfASilentWorkerAgreeOverTheWire) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  QuorumOptions options;
  options.heartbeat_timeout = 300ms;
  options.arrival_timeout = 10s;
  server.hostQuorum(3, 40, options);
  CoordinatorClient w0(local(server.port()), 2000ms, tandem::testing::testSecurity());
  CoordinatorClient w1(local(server.port()), 2000ms, tandem::testing::testSecurity());
  QuorumView v = w0.quorumBeat(0, Deadline::after(2s));
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.current.step, 40);
  EXPECT_FALSE(v.round_open);
  // Worker 2 never beats: past 300 ms the others are told to come.
  const auto until = Clock::now() + 5s;
  while (!v.round_open && Clock::now() < until) {
    std::this_thread::sleep_for(50ms);
    w1.quorumBeat(1, Deadline::after(2s));
    v = w0.quorumBeat(0, Deadline::after(2s));
  }
  ASSERT_TRUE(v.round_open) << "worker 2's silence was never noticed";
  EXPECT_EQ(v.awaited, (std::vector<int>{0, 1}));
  v = w0.quorumArrive(0, 0, 41, Deadline::after(2s));
  EXPECT_EQ(v.current.generation, 0);
  EXPECT_EQ(v.awaited, (std::vector<int>{1}));
  v = w1.quorumArrive(1, 0, 40, Deadline::after(2s));
  ASSERT_FALSE(v.stopped);
  EXPECT_EQ(v.current.generation, 1);
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1}));
  EXPECT_EQ(v.current.step, 41);
  EXPECT_EQ(v.current.source, 0);
  EXPECT_EQ(v.current.healing, (std::vector<int>{1}));
  ASSERT_EQ(v.current.departed.size(), 1u);
  EXPECT_EQ(v.current.departed[0].worker, 2);
  EXPECT_TRUE(v.current.departed[0].why.starts_with("silent for ")) << v.current.departed[0].why;
  EXPECT_EQ(w0.quorumBeat(0, Deadline::after(2s)), v) << "the formed generation is what a later beat sees";
  v = w1.quorumLeave(1, Deadline::after(2s));
  EXPECT_TRUE(v.stopped.has_value() || v.round_open) << "worker 1 left: a change is under way";
}

// The link beats for its worker, tells it when a change is pending, and
// says when the coordinator is gone.
TEST(CoordinatorQuorum, ALinkKeepsItsWorkerAliveAndHearsOfAPendingChange) {
  auto server = std::make_unique<CoordinatorServer>("127.0.0.1", 0, tandem::testing::testSecurity());
  const int port = server->port();
  QuorumOptions options;
  options.heartbeat_timeout = 400ms;
  server->hostQuorum(3, 0, options);
  QuorumLink w0(local(port), "worker 0", tandem::testing::testSecurity(), 0, 50ms, 400ms);
  QuorumLink w1(local(port), "tandem launch", tandem::testing::testSecurity(), 1, 50ms, 400ms);
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(w0.changePending(0)) << "every worker is within its timeout";
  const auto until = Clock::now() + 5s;
  while (!w0.changePending(0) && Clock::now() < until) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(w0.changePending(0)) << "worker 2 never beat: the link must hear of the round";
  EXPECT_FALSE(w0.changePending(1)) << "a view of generation 0 says nothing to a worker that knows generation 1";
  CoordinatorClient probe(local(port), 2000ms, tandem::testing::testSecurity());
  const QuorumView v = probe.quorumBeat(1, Deadline::after(2s));
  EXPECT_EQ(v.awaited, (std::vector<int>{0, 1})) << "workers 0 and 1 are alive through their links";
  EXPECT_FALSE(w0.lost());
  server.reset();
  const auto gone = Clock::now() + 5s;
  while (!w1.lost() && Clock::now() < gone) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(w1.lost()) << "a coordinator that stopped answering was never noticed";
  EXPECT_NE(w1.lost()->find(fmt::format("coordinator (tandem launch) at 127.0.0.1:{} did not answer", port)),
            std::string::npos)
      << *w1.lost();
}

// A store another process serves (launch) hosts the quorum at the chief's
// request. A chief started again into the running job asks again: the
// membership it finds stays as it is.
TEST(CoordinatorQuorum, TheChiefsRequestHostsTheQuorumOnceAndASecondKeepsIt) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient chief(local(server.port()), 2000ms, tandem::testing::testSecurity(), "tandem launch");
  QuorumOptions options{.min_workers = 2, .heartbeat_timeout = 5s};
  QuorumView v = chief.hostQuorum(3, 40, options, Deadline::after(2s));
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v.current.step, 40);
  EXPECT_FALSE(v.round_open);
  // Worker 2 arrives with a failed collective: a round opens and waits for 0 and 1.
  CoordinatorClient w2(local(server.port()), 2000ms, tandem::testing::testSecurity());
  v = w2.quorumArrive(2, 0, 45, Deadline::after(2s));
  EXPECT_TRUE(v.round_open);
  v = chief.hostQuorum(2, 0, QuorumOptions{}, Deadline::after(2s));
  EXPECT_EQ(v.current.workers, (std::vector<int>{0, 1, 2})) << "a second request reset the membership";
  EXPECT_EQ(v.current.step, 40);
  EXPECT_TRUE(v.round_open) << "the round under way was lost";

  // Options that cannot hold are refused to the chief, naming the flag.
  CoordinatorServer fresh("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient other(local(fresh.port()), 2000ms, tandem::testing::testSecurity());
  try {
    other.hostQuorum(2, 0, QuorumOptions{.min_workers = 3}, Deadline::after(2s));
    FAIL() << "--min-workers 3 of 2 was hosted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--min-workers 3"), std::string::npos) << e.what();
  }
}

TEST(CoordinatorQuorum, AJobWithoutAQuorumRefusesItsRequests) {
  CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  CoordinatorClient client(local(server.port()), 2000ms, tandem::testing::testSecurity());
  try {
    client.quorumBeat(0, Deadline::after(2s));
    FAIL() << "a beat without a quorum was answered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this job's membership is fixed"), std::string::npos) << e.what();
  }
  EXPECT_THROW(server.hostQuorum(2, 0, QuorumOptions{.min_workers = 3}), InputError);
}

}  // namespace
}  // namespace tandem::cluster
