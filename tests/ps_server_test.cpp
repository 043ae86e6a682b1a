// ParameterServer end to end, in-process: the server runs serve() on its own
// thread, and each simulated worker is its own DEALER socket (so the server
// sees distinct routing ids) that can hold several requests in flight. That
// lets a test show that a reply is *held back* (a pull before the last push,
// a clock before the slowest worker) and then released. Every wait is bounded
// by a deadline, so a server bug fails a test instead of hanging it.
#include <gtest/gtest.h>
#include <zmq.hpp>

#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/deadline.hpp"
#include "core/error.hpp"
#include "net/frame.hpp"
#include "net/request_client.hpp"
#include "ps/optimizer_kernels.hpp"
#include "ps/protocol.hpp"
#include "ps/server.hpp"

namespace tandem::ps {
namespace {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;
using net::Frame;
using net::FrameHeader;
using net::MessageType;

// A reply that must come gets this long: far beyond what any of them needs.
constexpr Ms kReplyBudget = 2000ms;
// How long a test watches for a reply that must NOT come yet.
constexpr Ms kQuiet = 60ms;
constexpr uint64_t kFingerprint = 0xF00DCAFE12345678ULL;

// ParameterServer::serve() on a thread. The destructor aborts and joins, so a
// failing test never leaves the thread behind.
class RunningServer {
 public:
  explicit RunningServer(ServerOptions options) : server_(std::move(options)) {
    result_ = promise_.get_future();
    thread_ = std::thread([this] {
      try {
        promise_.set_value(server_.serve(&abort_));
      } catch (...) {
        promise_.set_exception(std::current_exception());
      }
    });
  }
  ~RunningServer() {
    abort_ = true;
    thread_.join();
  }

  std::string endpoint() const { return net::tcpEndpoint("127.0.0.1", server_.port()); }

  // Whether serve() has returned (or thrown) within `budget`.
  bool finishes(Ms budget) { return result_.wait_for(budget) == std::future_status::ready; }
  // serve()'s summary; rethrows what serve() threw. Fails the test, by
  // throwing, if serve() has not returned within `budget`.
  nlohmann::json summary(Ms budget = kReplyBudget) {
    if (!finishes(budget)) throw std::runtime_error("serve() did not return in time");
    return result_.get();
  }

 private:
  ParameterServer server_;
  std::atomic<bool> abort_{false};
  std::promise<nlohmann::json> promise_;
  std::future<nlohmann::json> result_;
  std::thread thread_;
};

// One DEALER socket: a simulated worker, or a misbehaving client. Requests
// get ids 1, 2, ...; replies are matched by id and ones not asked for yet
// are kept, so several requests may be outstanding at once.
class Peer {
 public:
  Peer(zmq::context_t& context, const std::string& endpoint) : socket_(context, zmq::socket_type::dealer) {
    net::configureSocket(socket_);
    socket_.connect(endpoint);
  }

  uint64_t send(FrameHeader header, const void* data = nullptr, size_t size = 0) {
    header.request_id = next_id_++;
    if (!net::sendFrame(socket_, header, net::copyPayload(data, size))) {
      throw std::runtime_error("DEALER refused a send");
    }
    return header.request_id;
  }
  template <class T>
  uint64_t send(FrameHeader header, const std::vector<T>& payload) {
    return send(header, payload.data(), payload.size() * sizeof(T));
  }

  // Sends the given parts as one multipart message, byte for byte.
  void sendRaw(const std::vector<std::vector<char>>& parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
      zmq::message_t part(parts[i].data(), parts[i].size());
      auto flags = i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket_.send(part, flags | zmq::send_flags::dontwait)) throw std::runtime_error("DEALER refused a send");
    }
  }

  // Whether the reply to `id` arrives within `watch` (it is kept for await).
  bool answered(uint64_t id, Ms watch = kQuiet) {
    const Deadline deadline = Deadline::after(watch);
    while (!stash_.count(id)) {
      if (!receiveOne(deadline)) return false;
    }
    return true;
  }

  // The reply to `id`; throws (failing the test) if it does not come in time.
  Frame await(uint64_t id, Ms budget = kReplyBudget) {
    if (!answered(id, budget)) {
      throw std::runtime_error("no reply to request " + std::to_string(id) + " within " +
                               net::formatDuration(budget));
    }
    Frame f = std::move(stash_.at(id));
    stash_.erase(id);
    return f;
  }

  Frame request(FrameHeader header, const void* data = nullptr, size_t size = 0) {
    return await(send(header, data, size));
  }
  template <class T>
  Frame request(FrameHeader header, const std::vector<T>& payload) {
    return await(send(header, payload));
  }

 private:
  bool receiveOne(Deadline deadline) {
    std::vector<zmq::message_t> parts;
    while (!deadline.expired()) {
      if (!net::waitReadable(socket_, deadline.remaining())) continue;
      const size_t total = net::receiveParts(socket_, parts, 2);
      if (total == 0) continue;
      Frame f = net::decodeFrame(parts, total, net::kMaxPayloadBytes, "the server");
      const uint64_t id = f.header.request_id;
      if (stash_.count(id)) throw std::runtime_error("two replies to request " + std::to_string(id));
      stash_.emplace(id, std::move(f));
      return true;
    }
    return false;
  }

  zmq::socket_t socket_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Frame> stash_;
};

// --- protocol helpers -------------------------------------------------------

std::vector<float> floatsOf(const Frame& f) {
  std::vector<float> out(f.payload.size() / sizeof(float));
  std::memcpy(out.data(), f.payload.data(), out.size() * sizeof(float));
  return out;
}

void expectOk(const Frame& f) {
  EXPECT_EQ(f.header.type, MessageType::kOk) << "reply: " << net::messageTypeName(f.header.type) << " " << f.text();
}

void expectError(const Frame& f, const std::string& phrase) {
  EXPECT_EQ(f.header.type, MessageType::kError) << net::messageTypeName(f.header.type);
  EXPECT_NE(f.text().find(phrase), std::string_view::npos) << "'" << f.text() << "' lacks '" << phrase << "'";
}

// Bit-exact: the server must compute exactly what the kernels compute.
void expectBitEqual(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

StepAgreement agreementOf(const Frame& f) {
  EXPECT_EQ(f.header.type, MessageType::kPsClock) << net::messageTypeName(f.header.type) << " " << f.text();
  return decodeStepAgreement(f.bytes(), "the server");
}

FrameHeader header(MessageType type, uint64_t key = 0, uint32_t clock = 0) {
  return {.type = type, .clock = clock, .key_begin = key, .key_end = key + 1};
}

uint64_t push(Peer& p, uint64_t key, uint32_t step, const std::vector<float>& grad) {
  return p.send(header(MessageType::kPsPush, key, step), grad);
}
uint64_t pull(Peer& p, uint64_t key, uint32_t clock) { return p.send(header(MessageType::kPsPull, key, clock)); }
uint64_t reportClock(Peer& p, uint32_t step, const StepReport& report) {
  return p.send({.type = MessageType::kPsClock, .clock = step}, encode(report));
}
Frame hello(Peer& p, uint32_t worker, uint64_t fingerprint = kFingerprint) {
  return p.request({.type = MessageType::kPsHello}, encode(Hello{worker, fingerprint}));
}

// Deterministic, non-round values so that the order of float operations shows.
std::vector<float> pattern(int64_t n, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = offset + scale * static_cast<float>(i + 1) / 3.0f;
  return v;
}

ServerConfig makeConfig(Mode mode, int workers, std::vector<ChunkRange> chunks) {
  ServerConfig c;
  c.mode = mode;
  c.workers = workers;
  c.lr_by_step = {0.5, 0.25};
  c.layout_fingerprint = kFingerprint;
  c.chunks = std::move(chunks);
  c.peer_timeout_s = 5;
  return c;
}

class PsServer : public ::testing::Test {
 protected:
  // Starts the server; unless `initialize` is false, initialises it as the
  // chief would (kPsInit, then kPsSet of every chunk's `initial` values)
  // through a net::RequestClient, the same blocking client the chief uses.
  void start(const ServerConfig& config, ServerOptions options = {}, bool initialize = true) {
    config_ = config;
    options.bind_host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<RunningServer>(options);
    if (initialize) init();
  }

  void init() {
    net::RequestClient chief(context_, server_->endpoint(), "ps 0");
    const std::string json = toJson(config_).dump();
    auto reply = chief.request({.type = MessageType::kPsInit}, net::copyPayload(json), Deadline::after(kReplyBudget));
    ASSERT_TRUE(reply.has_value()) << "no reply to ps-init";
    expectOk(*reply);
    for (const auto& r : config_.chunks) {
      const auto values = initial(r);
      reply = chief.request(header(MessageType::kPsSet, r.key), net::copyPayload(values.data(), values.size() * 4),
                            Deadline::after(kReplyBudget));
      ASSERT_TRUE(reply.has_value()) << "no reply to ps-set " << r.key;
      expectOk(*reply);
    }
  }

  static std::vector<float> initial(const ChunkRange& r) {
    return pattern(r.length, 0.7f, static_cast<float>(r.key) - 0.35f);
  }

  // A fresh DEALER; hello'd as `worker` unless worker < 0.
  Peer worker(int worker = -1) {
    Peer p(context_, server_->endpoint());
    if (worker >= 0) expectOk(hello(p, static_cast<uint32_t>(worker)));
    return p;
  }

  // Sockets (declared in tests, destroyed first) close before the context.
  zmq::context_t context_{1};
  ServerConfig config_;
  std::unique_ptr<RunningServer> server_;
};

// --- 1. sync push/pull ------------------------------------------------------

TEST_F(PsServer, SyncSumsBothWorkersAndHoldsPullsUntilTheStepIsApplied) {
  ServerConfig c = makeConfig(Mode::kSync, 2, {{0, 5}, {7, 3}});
  c.optimizer.name = "sgd";
  c.optimizer.sgd.momentum = 0.9;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);

  // What the server must compute, from the same kernel.
  auto param = initial(c.chunks[0]);
  std::vector<float> momentum(param.size());
  auto step = [&](const std::vector<float>& g0, const std::vector<float>& g1, uint64_t t) {
    std::vector<float> sum(g0.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = g0[i] + g1[i];  // worker order
    SgdSettings s = c.optimizer.sgd;
    s.lr = c.lr_by_step[t];
    sgdUpdate(param, sum, momentum, t == 0, s);
  };

  // Step 0, chunk 0: worker 0 pushes and asks for version 1 at once.
  const auto g00 = pattern(5, 0.01f, -0.02f), g10 = pattern(5, -0.03f, 0.011f);
  expectOk(w0.await(push(w0, 0, 0, g00)));
  const uint64_t early = pull(w0, 0, 1);
  EXPECT_FALSE(w0.answered(early)) << "version 1 served before worker 1 pushed step 0";
  // Worker 1's push of step 0 releases the pull.
  expectOk(w1.await(push(w1, 0, 0, g10)));
  Frame v1 = w0.await(early);
  ASSERT_EQ(v1.header.type, MessageType::kPsValues) << v1.text();
  EXPECT_EQ(v1.header.clock, 1u);
  EXPECT_EQ(v1.header.key_begin, 0u);
  step(g00, g10, 0);
  expectBitEqual(floatsOf(v1), param);  // param - lr * (g0 + g1): the momentum buffer starts as the gradient

  // A second push for a step already applied is refused, naming both steps.
  expectError(w0.request(header(MessageType::kPsPush, 0, 0), g00), "for step 0 but the chunk is at step 1");
  // So is a second push for the same step.
  const auto g01 = pattern(5, 0.02f, 0.005f), g11 = pattern(5, 0.017f, -0.04f);
  expectOk(w0.await(push(w0, 0, 1, g01)));
  expectError(w0.request(header(MessageType::kPsPush, 0, 1), g01), "twice for step 1");

  // Step 1 uses the momentum buffer and lr_by_step[1].
  expectOk(w1.await(push(w1, 0, 1, g11)));
  step(g01, g11, 1);
  Frame v2 = w1.await(pull(w1, 0, 2));
  EXPECT_EQ(v2.header.clock, 2u);
  expectBitEqual(floatsOf(v2), param);
  // An older version is still served (the current values).
  expectBitEqual(floatsOf(w0.await(pull(w0, 0, 1))), param);

  // Chunk 7 is independent: still at version 0 and unchanged.
  Frame other = w1.await(pull(w1, 7, 0));
  EXPECT_EQ(other.header.clock, 0u);
  expectBitEqual(floatsOf(other), initial(c.chunks[1]));
}

// --- 2. async ---------------------------------------------------------------

TEST_F(PsServer, AsyncAppliesAdamPushesInArrivalOrder) {
  ServerConfig c = makeConfig(Mode::kAsync, 2, {{3, 6}});
  c.optimizer.name = "adam";
  c.lr_by_step = {0.01, 0.002};
  start(c);
  Peer w0 = worker(0), w1 = worker(1);

  const auto g0 = pattern(6, 0.1f, -0.3f), g1 = pattern(6, -0.05f, 0.2f), g2 = pattern(6, 0.3f, 0.01f);
  // No waiting for the other worker: each push is taken at once.
  expectOk(w1.await(push(w1, 3, 0, g0)));
  expectOk(w0.await(push(w0, 3, 0, g1)));
  expectOk(w1.await(push(w1, 3, 1, g2)));
  // The pull waits for every push received before it.
  Frame v = w0.await(pull(w0, 3, 0));
  ASSERT_EQ(v.header.type, MessageType::kPsValues) << v.text();
  EXPECT_EQ(v.header.clock, 3u);

  auto param = initial(c.chunks[0]);
  std::vector<float> m(param.size()), s(param.size());
  int64_t update = 0;
  for (const auto* g : {&g0, &g1, &g2}) {
    AdamSettings a = c.optimizer.adam;
    // The schedule advances once per round of `workers` pushes.
    a.lr = c.lrAt(static_cast<uint64_t>(update) / 2);
    adamUpdate(param, *g, m, s, ++update, a);
  }
  expectBitEqual(floatsOf(v), param);
}

// --- 3. clocks --------------------------------------------------------------

TEST_F(PsServer, SyncClockIsABarrierWithTheMeanLoss) {
  start(makeConfig(Mode::kSync, 2, {{0, 2}}));
  Peer w0 = worker(0), w1 = worker(1);

  const uint64_t first = reportClock(w0, 1, {.loss = 1.0, .compute_seconds = 0.2});
  EXPECT_FALSE(w0.answered(first)) << "worker 0 released before worker 1 finished step 1";
  const uint64_t second = reportClock(w1, 1, {.loss = 4.0, .compute_seconds = 0.5, .stop = true});
  std::vector<Frame> replies;
  replies.push_back(w0.await(first));
  replies.push_back(w1.await(second));
  for (const Frame& f : replies) {
    EXPECT_EQ(f.header.clock, 1u);
    StepAgreement a = agreementOf(f);
    EXPECT_EQ(a.loss, 2.5);
    EXPECT_EQ(a.slowest_compute_seconds, 0.5);
    EXPECT_TRUE(a.stop);
    EXPECT_EQ(a.slowest_clock, 1u);
  }
  // Clocks count up by one.
  expectError(w0.request({.type = MessageType::kPsClock, .clock = 3}, encode(StepReport{})),
              "reported step 3 finished, but its last report was step 1");
  expectOk(w0.request({.type = MessageType::kPsDone}));
  // A finished worker holds nobody back.
  StepAgreement alone = agreementOf(w1.await(reportClock(w1, 2, {.loss = 3.0})));
  EXPECT_EQ(alone.loss, 3.0);
  expectOk(w1.request({.type = MessageType::kPsDone}));
  EXPECT_EQ(server_->summary()["max_staleness"], 0);
}

TEST_F(PsServer, SspLetsAWorkerRunOneStepAhead) {
  ServerConfig c = makeConfig(Mode::kBounded, 2, {{0, 2}});
  c.staleness = 1;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);

  // One step ahead of the slowest is allowed, two are not.
  StepAgreement a1 = agreementOf(w0.await(reportClock(w0, 1, {.loss = 1.5})));
  EXPECT_EQ(a1.slowest_clock, 0u);
  EXPECT_EQ(a1.loss, 1.5);  // each worker's own loss outside sync mode
  const uint64_t ahead = reportClock(w0, 2, {.loss = 2.5});
  EXPECT_FALSE(w0.answered(ahead)) << "worker 0 ran 2 steps ahead with staleness 1";
  // Worker 1 finishing step 1 releases itself and worker 0's step 2.
  StepAgreement b1 = agreementOf(w1.await(reportClock(w1, 1, {.loss = 9.0})));
  EXPECT_EQ(b1.slowest_clock, 1u);
  EXPECT_EQ(b1.loss, 9.0);
  StepAgreement a2 = agreementOf(w0.await(ahead));
  EXPECT_EQ(a2.slowest_clock, 1u);
  EXPECT_EQ(a2.loss, 2.5);
  // And again one step later.
  const uint64_t ahead3 = reportClock(w0, 3, {});
  EXPECT_FALSE(w0.answered(ahead3));
  agreementOf(w1.await(reportClock(w1, 2, {})));
  EXPECT_EQ(agreementOf(w0.await(ahead3)).slowest_clock, 2u);

  expectOk(w0.request({.type = MessageType::kPsDone}));
  expectOk(w1.request({.type = MessageType::kPsDone}));
  const auto summary = server_->summary();
  EXPECT_EQ(summary["max_staleness"], 1);
  EXPECT_EQ(summary["mode"], "ssp");
}

TEST_F(PsServer, AsyncClockNeverWaits) {
  start(makeConfig(Mode::kAsync, 2, {{0, 2}}));
  Peer w0 = worker(0);
  worker(1);  // says hello, then never reports
  for (uint32_t step = 1; step <= 4; ++step) {
    StepAgreement a = agreementOf(w0.await(reportClock(w0, step, {.loss = static_cast<double>(step)})));
    EXPECT_EQ(a.slowest_clock, 0u);
    EXPECT_EQ(a.loss, static_cast<double>(step));
  }
}

TEST_F(PsServer, AClockWaitExpiresNamingTheLateWorker) {
  ServerConfig c = makeConfig(Mode::kSync, 2, {{0, 2}});
  c.peer_timeout_s = 0.5;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);
  const auto start_time = Clock::now();
  Frame f = w0.await(reportClock(w0, 1, {}), 2000ms);
  const double waited = secondsSince(start_time);
  expectError(f, "worker 1 (finished 0 steps");
  expectError(f, "step 1");
  EXPECT_EQ(f.text().find("worker 0 ("), std::string_view::npos) << f.text();
  EXPECT_GE(waited, 0.45);
}

// --- 4. malformed frames ----------------------------------------------------

std::vector<char> headerBytes(FrameHeader h) {
  const auto bytes = net::encodeHeader(h);
  std::vector<char> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST_F(PsServer, MalformedFramesGetAnErrorAndOthersAreStillServed) {
  ServerConfig c = makeConfig(Mode::kSync, 1, {{0, 4}});
  start(c);
  Peer junk = worker();  // never says hello
  Peer w0 = worker(0);
  int bad = 0;
  const std::vector<char> four_floats(16, 0);

  // Truncated header: no request id can be trusted, so the reply carries 0.
  {
    auto h = headerBytes({.type = MessageType::kPsPull, .request_id = 901, .key_end = 1});
    h.resize(20);
    junk.sendRaw({h, {}});
    expectError(junk.await(0), "truncated header: 20 of 48 bytes");
    ++bad;
  }
  // Wrong version: the id is salvaged.
  {
    auto h = headerBytes({.type = MessageType::kPsPull, .request_id = 902, .key_end = 1});
    h[4] = 1;  // version u16 at offset 4
    h[5] = 0;
    junk.sendRaw({h, {}});
    expectError(junk.await(902), "unsupported version 1");
    ++bad;
  }
  // Random bytes (fixed seed; the magic made wrong for sure).
  {
    std::mt19937 random(1234);
    std::vector<char> noise(48), more(16);
    for (auto& b : noise) b = static_cast<char>(random());
    for (auto& b : more) b = static_cast<char>(random());
    noise[0] = 'X';
    junk.sendRaw({noise, more});
    expectError(junk.await(0), "bad magic");
    ++bad;
  }
  // A header announcing more than the payload limit; little actually sent.
  {
    auto h = headerBytes(
        {.type = MessageType::kPsPush, .request_id = 904, .key_end = 1, .payload_bytes = uint64_t{1} << 40});
    junk.sendRaw({h, four_floats});
    expectError(junk.await(904), "exceeds the 64 MiB limit");
    ++bad;
  }
  // A header announcing a payload size other than the one that arrived.
  {
    auto h = headerBytes({.type = MessageType::kPsPush, .request_id = 905, .key_end = 1, .payload_bytes = 16});
    junk.sendRaw({h, std::vector<char>(12)});
    expectError(junk.await(905), "announces a payload of 16 bytes but 12 arrived");
    ++bad;
  }
  // Three parts, and one.
  {
    auto h = headerBytes({.type = MessageType::kPsPull, .request_id = 906, .key_end = 1});
    junk.sendRaw({h, {}, {'x'}});
    expectError(junk.await(906), "expected 2 message parts (header, payload), got 3");
    h = headerBytes({.type = MessageType::kPsPull, .request_id = 907, .key_end = 1});
    junk.sendRaw({h});
    expectError(junk.await(907), "got 1");
    bad += 2;
  }
  // Well-formed frames the server must still refuse.
  expectError(junk.request(header(MessageType::kPsPush, 0, 0), four_floats), "ps-push before ps-hello");
  expectError(w0.request(header(MessageType::kPsPush, 999, 0), four_floats), "unknown key 999");
  expectError(w0.request(header(MessageType::kPsPush, 0, 0), std::vector<char>(12)),
              "carries 12 bytes; the chunk holds 4 floats (16 bytes)");
  expectError(w0.request({.type = MessageType::kPsPull, .key_begin = 0, .key_end = 2}), "exactly one chunk");
  expectError(w0.request({.type = MessageType::kStoreGet}), "is not a parameter-server request");
  expectError(w0.request({.type = MessageType::kPsSet, .key_end = 1}, four_floats), "after training started");
  bad += 6;

  // The worker is served as if nothing had happened.
  const auto g = pattern(4, 0.25f, -0.1f);
  expectOk(w0.await(push(w0, 0, 0, g)));
  Frame v = w0.await(pull(w0, 0, 1));
  ASSERT_EQ(v.header.type, MessageType::kPsValues) << v.text();
  auto param = initial(c.chunks[0]);
  std::vector<float> momentum(param.size());
  SgdSettings s = c.optimizer.sgd;
  s.lr = c.lr_by_step[0];
  sgdUpdate(param, g, momentum, true, s);
  expectBitEqual(floatsOf(v), param);

  expectOk(w0.request({.type = MessageType::kPsDone}));
  const auto summary = server_->summary();
  EXPECT_EQ(summary["bad_frames"], bad);
  EXPECT_EQ(summary["updates"], 1);
  EXPECT_EQ(summary["pushes"], 1);
}

// --- 5. hello and lifecycle -------------------------------------------------

TEST_F(PsServer, HellosWaitForTheChiefAndAreChecked) {
  start(makeConfig(Mode::kSync, 2, {{0, 3}, {1, 2}}), {}, /*initialize=*/false);
  Peer early = worker(), wrong_layout = worker(), no_such = worker();
  const uint64_t early_hello = early.send({.type = MessageType::kPsHello}, encode(Hello{1, kFingerprint}));
  const uint64_t wrong_hello = wrong_layout.send({.type = MessageType::kPsHello}, encode(Hello{0, 0xBAD}));
  EXPECT_FALSE(early.answered(early_hello)) << "hello answered before the chief initialised the server";
  EXPECT_FALSE(wrong_layout.answered(wrong_hello));
  init();
  expectOk(early.await(early_hello));
  expectError(wrong_layout.await(wrong_hello), "computed parameter layout 0000000000000bad but the chief's is");
  expectError(hello(no_such, 5), "worker 5 does not exist: the cluster has 2 worker(s)");
  // Worker 1 is taken by `early`'s socket.
  expectError(hello(no_such, 1), "worker 1 is already connected from another socket");
  // A malformed hello.
  expectError(no_such.request({.type = MessageType::kPsHello}, std::vector<char>(3)), "ps-hello payload");
}

TEST_F(PsServer, ServeReturnsOnceEveryWorkerIsDone) {
  start(makeConfig(Mode::kSync, 2, {{0, 2}}));
  Peer w0 = worker(0), w1 = worker(1);
  expectOk(w0.request({.type = MessageType::kPsDone}));
  EXPECT_FALSE(server_->finishes(kQuiet)) << "serve() returned while worker 1 was still there";
  expectOk(w1.request({.type = MessageType::kPsDone}));
  const auto summary = server_->summary();
  EXPECT_EQ(summary["workers"], 2);
  EXPECT_TRUE(summary["lost_workers"].empty()) << summary.dump();
  EXPECT_EQ(summary["bad_frames"], 0);
}

TEST_F(PsServer, ASilentWorkerIsListedAsLost) {
  ServerConfig c = makeConfig(Mode::kSync, 2, {{0, 2}});
  c.peer_timeout_s = 0.5;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);
  const auto since = Clock::now();
  expectOk(w0.request({.type = MessageType::kPsDone}));
  const auto summary = server_->summary(2000ms);
  EXPECT_GE(secondsSince(since), 0.4);
  EXPECT_EQ(summary["lost_workers"], nlohmann::json::array({1})) << summary.dump();
}

// Regression: time a worker spends blocked on the server is not silence.
// Worker 0's pull is held 0.5 s (worker 1 pushes late), then worker 0
// computes 0.5 s: each gap is within the 0.8 s peer timeout, so worker 0
// must not be declared lost even though 1 s passed since it last sent.
TEST_F(PsServer, TimeSpentWaitingOnTheServerIsNotSilence) {
  ServerConfig c = makeConfig(Mode::kSync, 2, {{0, 2}});
  c.peer_timeout_s = 0.8;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);
  const auto g = pattern(2, 0.1f, 0.0f);
  expectOk(w0.await(push(w0, 0, 0, g)));
  const uint64_t held = pull(w0, 0, 1);
  EXPECT_FALSE(w0.answered(held, 500ms));  // blocked on worker 1
  expectOk(w1.await(push(w1, 0, 0, g)));
  EXPECT_EQ(w0.await(held).header.type, MessageType::kPsValues);
  expectOk(w1.request({.type = MessageType::kPsDone}));
  // Worker 0 computes for 0.5 s: it must still be served afterwards.
  const bool returned_early = server_->finishes(500ms);
  EXPECT_FALSE(returned_early) << "serve() gave up on worker 0 while it computed after a long pull";
  if (!returned_early) expectOk(w0.request({.type = MessageType::kPsDone}));
  const auto summary = server_->summary();
  EXPECT_TRUE(summary["lost_workers"].empty()) << summary.dump();
}

// Regression: a pull that can never be answered (a sync worker died before
// pushing) expires after the peer timeout, so serve() returns once every
// worker is gone instead of holding the pull forever.
TEST_F(PsServer, ServeReturnsWhenEveryWorkerDiedEvenWithAPullHeld) {
  ServerConfig c = makeConfig(Mode::kSync, 2, {{0, 2}});
  c.peer_timeout_s = 0.5;
  start(c);
  {
    Peer w0 = worker(0), w1 = worker(1);
    expectOk(w0.await(push(w0, 0, 0, pattern(2, 0.1f, 0.0f))));
    pull(w0, 0, 1);  // held: worker 1 never pushes
    EXPECT_TRUE(w0.answered(reportClock(w0, 1, {}), 2000ms));  // the clock wait does expire
  }  // both workers' sockets close: they are gone
  nlohmann::json summary;
  EXPECT_NO_THROW(summary = server_->summary(2000ms)) << "serve() still waits for a worker whose pull can never be answered";
  EXPECT_EQ(summary["lost_workers"], nlohmann::json::array({0, 1})) << summary.dump();
}

TEST_F(PsServer, ThrowsPeerErrorWhenTheChiefNeverInitialises) {
  start(makeConfig(Mode::kSync, 1, {{0, 2}}), {.startup_timeout_s = 0.3}, /*initialize=*/false);
  try {
    server_->summary(2000ms);
    ADD_FAILURE() << "serve() returned without an init";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("did not initialise this server"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::ps
