// ps::Worker, the worker's side of the protocol, against real servers in
// this process: no torch, no trainer.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <span>
#include <thread>
#include <zmq.hpp>

#include "net/job_security.hpp"
#include "core/error.hpp"
#include "ps/messages.hpp"
#include "ps/worker.hpp"
#include "support/process.hpp"
#include "support/ps_server_harness.hpp"
#include "support/test_security.hpp"

namespace tandem::ps::testing {
namespace {

// Two servers, a 10-float model in 4-float chunks, SGD at rate 0.5.
struct Job {
  KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16);
  std::vector<std::unique_ptr<RunningServer>> servers;
  std::vector<ServerAddress> addresses;

  explicit Job(Mode mode, WireDtype wire = WireDtype::kFloat32) : wire(wire) {
    for (int i = 0; i < 2; ++i) {
      servers.push_back(std::make_unique<RunningServer>(ServerOptions{.bind_host = "127.0.0.1", .index = i}));
      addresses.push_back({servers.back()->endpoint(), "ps " + std::to_string(i)});
    }
    this->mode = mode;
  }
  Mode mode;
  WireDtype wire;

  std::vector<ServerConfig> configs(int workers) const { return configsFor(layout, mode, wire, workers, 10); }
  Worker worker(uint32_t index) const { return Worker({addresses, layout, mode, index, wire}, tandem::testing::testSecurity()); }
};

TEST(PsWorker, TwoSyncWorkersPushReportAndPullTheMeanUpdate) {
  Job job(Mode::PsSync);
  ASSERT_EQ(job.layout.chunks.size(), 3u);  // 4 + 4 + 2 floats over 2 servers
  const Deadline deadline = Deadline::afterSeconds(5);
  Worker chief = job.worker(0);
  chief.initServers(job.configs(2), [&](size_t c, int64_t&) { return initial(job.layout, c); }, deadline);
  // Each worker pushes its share of the mean (pre-scaled by 1/2): 1 and 3,
  // so the update is 0.5 x (1 + 3) = 2 on every float.
  auto run = [&](Worker& w, float share, std::vector<std::vector<float>>& pulled) {
    w.hello(deadline);
    std::vector<std::vector<float>> grads;
    for (const auto& chunk : job.layout.chunks) grads.emplace_back(static_cast<size_t>(chunk.length), share);
    for (size_t c = 0; c < grads.size(); ++c) w.push(c, grads[c].data(), 0);
    const StepAgreement agreed = w.reportStep(1, {1.0, 0.1, false}, deadline);
    EXPECT_EQ(agreed.slowest_clock, 1u);
    w.awaitPushes(deadline, 0);
    w.receivePulls(deadline, 0, [&](size_t c, const PulledValues& v) {
      ASSERT_EQ(v.count, static_cast<size_t>(job.layout.chunks[c].length));
      const auto* floats = static_cast<const float*>(v.data);
      pulled[c].assign(floats, floats + v.count);
    });
    w.sayDone(deadline);
  };
  std::vector<std::vector<float>> pulled0(3), pulled1(3);
  Worker other = job.worker(1);
  std::thread second([&] { run(other, 1.5f, pulled1); });
  run(chief, 0.5f, pulled0);
  second.join();
  for (size_t c = 0; c < 3; ++c) {
    std::vector<float> expected = initial(job.layout, c);
    for (auto& v : expected) v -= 0.5f * (0.5f + 1.5f);
    EXPECT_EQ(pulled0[c], expected) << "chunk " << c;
    EXPECT_EQ(pulled1[c], expected) << "chunk " << c;
  }
  EXPECT_TRUE(chief.done());
  for (auto& s : job.servers) EXPECT_EQ(s->summary()["lost_workers"].size(), 0u);
}

// A 16-bit wire: the worker rounds the float32 pushes, the servers add
// them in float32 and keep float32 values (ps-state), and pulls carry those
// values rounded.
TEST(PsWorker, SixteenBitWireRoundsPushesAndPullsButServersKeepFloat32) {
  for (WireDtype wire : {WireDtype::kFloat16, WireDtype::kBfloat16}) {
    SCOPED_TRACE(wireDtypeName(wire));
    Job job(Mode::PsSync, wire);
    const Deadline deadline = Deadline::afterSeconds(5);
    Worker chief = job.worker(0);
    chief.initServers(job.configs(2), [&](size_t c, int64_t&) { return initial(job.layout, c); }, deadline);
    auto round = [&](float v) {
      uint16_t bits = 0;
      encodeWire(wire, &v, &bits, 1);
      float back = 0;
      decodeWire(wire, &bits, &back, 1);
      return back;
    };
    std::vector<std::vector<float>> pulled0(3), pulled1(3);
    auto run = [&](Worker& w, float share, std::vector<std::vector<float>>& pulled) {
      w.hello(deadline);
      std::vector<std::vector<float>> grads;
      for (const auto& chunk : job.layout.chunks) grads.emplace_back(static_cast<size_t>(chunk.length), share);
      for (size_t c = 0; c < grads.size(); ++c) w.push(c, grads[c].data(), 0);
      w.reportStep(1, {1.0, 0.1, false}, deadline);
      w.awaitPushes(deadline, 0);
      w.receivePulls(deadline, 0, [&](size_t c, const PulledValues& v) {
        ASSERT_EQ(v.count, static_cast<size_t>(job.layout.chunks[c].length));
        ASSERT_EQ(v.wire, wire);
        pulled[c].resize(v.count);
        decodeWire(wire, v.data, pulled[c].data(), pulled[c].size());
      });
    };
    Worker other = job.worker(1);
    std::thread second([&] { run(other, 0.3f, pulled1); });
    run(chief, 0.1f, pulled0);
    second.join();
    const auto state = chief.fetchState(1, /*slots=*/0, deadline);
    for (size_t c = 0; c < 3; ++c) {
      std::vector<float> master = initial(job.layout, c), rounded;
      for (auto& v : master) v -= 0.5f * (round(0.1f) + round(0.3f));
      for (float v : master) rounded.push_back(round(v));
      EXPECT_EQ(pulled0[c], rounded) << "chunk " << c;
      EXPECT_EQ(pulled1[c], rounded) << "chunk " << c;
      const auto values = state[c].values();
      EXPECT_EQ(std::vector<float>(values.begin(), values.end()), master) << "chunk " << c;
    }
    chief.sayDone(deadline);
    other.sayDone(deadline);
  }
}

TEST(PsWorker, AFloat32PushToASixteenBitServerIsRefusedNamingTheFormat) {
  Job job(Mode::PsAsync, WireDtype::kFloat16);
  const Deadline deadline = Deadline::afterSeconds(5);
  Worker chief = job.worker(0);
  chief.initServers(job.configs(2), [&](size_t c, int64_t&) { return initial(job.layout, c); }, deadline);
  chief.hello(deadline);
  // A worker that thinks the wire is float32 sends twice the bytes.
  Worker wrong({job.addresses, job.layout, Mode::PsAsync, 1, WireDtype::kFloat32}, tandem::testing::testSecurity());
  const std::vector<float> g(4, 1.0f);
  wrong.hello(deadline);
  wrong.push(0, g.data(), 0);
  try {
    wrong.awaitPushes(deadline, 0);
    FAIL() << "a float32 push was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("as fp16"), std::string::npos) << e.what();
  }
}

TEST(PsWorker, FetchStateReturnsEveryChunksValuesAndSlots) {
  Job job(Mode::PsAsync);
  const Deadline deadline = Deadline::afterSeconds(5);
  Worker w = job.worker(0);
  w.initServers(job.configs(1), [&](size_t c, int64_t&) { return initial(job.layout, c); }, deadline);
  w.hello(deadline);
  const auto states = w.fetchState(0, /*slots=*/0, deadline);
  ASSERT_EQ(states.size(), 3u);
  for (size_t c = 0; c < 3; ++c) {
    // Plain SGD keeps no slots: the values alone.
    const auto values = states[c].values();
    EXPECT_EQ(std::vector<float>(values.begin(), values.end()), initial(job.layout, c));
  }
  // Asked for a slot the servers' optimizer does not keep, every chunk's size is wrong.
  try {
    w.fetchState(0, /*slots=*/1, deadline);
    FAIL() << "state of another size was taken";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes of state for chunk 0"), std::string::npos) << e.what();
  }
  w.sayDone(deadline);
}

TEST(PsWorker, AServerThatIsNotThereIsNamedWhenTheDeadlinePasses) {
  Job job(Mode::PsSync);
  auto addresses = job.addresses;
  addresses[1] = {net::tcpEndpoint("127.0.0.1", tandem::testing::freePort()), "ps 1"};  // nobody listens
  Worker w({addresses, job.layout, Mode::PsSync, 0}, tandem::testing::testSecurity());
  const auto started = Clock::now();
  try {
    w.initServers(job.configs(1), [&](size_t c, int64_t&) { return initial(job.layout, c); },
                  Deadline::afterSeconds(0.5));
    FAIL() << "initialised a server that is not there";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("ps 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(3));
}

// A server played by hand: a ROUTER that records the chunks pushed to it,
// in the order they arrive, and acknowledges a push only when told to.
struct HandServer {
  zmq::context_t context{1};
  zmq::socket_t router{context, zmq::socket_type::router};
  std::unique_ptr<net::ZapHandler> zap = net::secureServer(context, router, "the hand server", tandem::testing::testSecurity());
  std::string endpoint;
  std::vector<zmq::message_t> parts;

  HandServer() {
    router.bind("tcp://127.0.0.1:*");
    endpoint = router.get(zmq::sockopt::last_endpoint);
  }
  // The next request's routing id and frame; fails the test after 2 s.
  std::pair<zmq::message_t, net::Frame> next() {
    if (!net::waitReadable(router, std::chrono::seconds(2))) throw std::runtime_error("no request came");
    const size_t total = net::receiveParts(router, parts, 3);
    zmq::message_t id;
    id.copy(parts[0]);
    return {std::move(id), net::decodeFrame(std::span(parts).subspan(1), total - 1, net::kMaxPayloadBytes, "worker", ps::kMessages)};
  }
  void ack(const zmq::message_t& id, const net::Frame& f) {
    net::sendFrame(router, {.type = net::MessageType::kOk, .request_id = f.header.request_id}, zmq::message_t(), &id);
  }
  // The keys of the next `n` pushes, each acknowledged once read; pulls
  // are recorded by key in `pulls`.
  std::vector<uint32_t> pushes(size_t n, std::vector<uint32_t>& pulls) {
    std::vector<uint32_t> keys;
    while (keys.size() < n) {
      auto [id, f] = next();
      if (f.header.type == ps::msg::kPull) {
        pulls.push_back(f.header.key_begin);
        continue;
      }
      keys.push_back(f.header.key_begin);
      ack(id, f);
    }
    return keys;
  }
};

// Priority scheduling: with a window of one chunk, backward hands over the
// last chunk first, and the chunks queued behind it go out lowest key first
// (the order the next forward needs them), each with its pull right behind.
TEST(PushWindow, QueuedPushesGoOutFirstChunkFirst) {
  for (size_t window : {size_t{0}, size_t{16}}) {
    SCOPED_TRACE("window " + std::to_string(window));
    HandServer server;
    const KeyLayout layout = buildKeyLayout({{"a", 4}, {"b", 4}, {"c", 4}, {"d", 4}}, 1, 16);
    ASSERT_EQ(layout.chunks.size(), 4u);
    Worker w({{{server.endpoint, "ps 0"}}, layout, Mode::PsSync, 0, WireDtype::kFloat32, window}, tandem::testing::testSecurity());
    std::vector<std::vector<float>> grads(4, std::vector<float>(4, 1.0f));
    for (size_t c = 4; c-- > 0;) w.push(c, grads[c].data(), 0);  // backward's order
    std::vector<uint32_t> pulls;
    const auto order = server.pushes(4, pulls);
    if (window == 0) {
      EXPECT_EQ(order, (std::vector<uint32_t>{3, 2, 1, 0}));
    } else {
      // Chunk 3 went out alone; 0, 1 and 2 waited and then went in key order.
      EXPECT_EQ(order, (std::vector<uint32_t>{3, 0, 1, 2}));
    }
    // Each pull went right behind its push: the first three are in by now.
    EXPECT_EQ(std::vector<uint32_t>(pulls.begin(), pulls.begin() + 3),
              std::vector<uint32_t>(order.begin(), order.begin() + 3));
  }
}

// The default window: two of the largest chunks per server, split among the
// host-mates that push to that server, never below one chunk.
TEST(PushWindow, HostMatesPushingToOneServerShareTheDefaultWindow) {
  // 8 chunks of 4 floats (16 bytes) over 4 servers, round-robin: chunk c on
  // server c % 4.
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < 8; ++i) tensors.push_back({"t" + std::to_string(i), 4});
  const KeyLayout layout = buildKeyLayout(tensors, 4, 16);
  ASSERT_EQ(layout.chunks.size(), 8u);
  for (size_t c = 0; c < 8; ++c) ASSERT_EQ(layout.chunks[c].server, static_cast<int>(c % 4));
  EXPECT_EQ(defaultPushWindow(layout, WireDtype::kFloat32), 32u);
  EXPECT_EQ(defaultPushWindow(layout, WireDtype::kBfloat16), 16u);
  EXPECT_EQ(defaultPushWindow(layout, WireDtype::kFloat32, 2), 16u);
  EXPECT_EQ(defaultPushWindow(layout, WireDtype::kFloat32, 4), 16u);  // one chunk at least
  // Flat: every host-mate pushes to every server.
  EXPECT_EQ(hostPushersPerServer(layout, {4, 5, 6, 7}, 5, false), 4u);
  EXPECT_EQ(hostPushersPerServer(layout, {2}, 2, true), 1u);
  // 4 host-mates: rank r owns chunks r and r + 4, both on server r.
  for (int w = 0; w < 4; ++w) EXPECT_EQ(hostPushersPerServer(layout, {0, 1, 2, 3}, w, true), 1u);
  // 8: each server's two chunks have two owners.
  EXPECT_EQ(hostPushersPerServer(layout, {0, 1, 2, 3, 4, 5, 6, 7}, 5, true), 2u);
  // 3: chunks 0..7 go to ranks 0,1,2,0,1,2,0,1 and servers 0,1,2,3,0,1,2,3:
  // servers 0 and 3 get ranks 0 and 1, server 1 ranks 1 and 2, server 2
  // ranks 2 and 0.
  for (int w : {3, 4, 5}) EXPECT_EQ(hostPushersPerServer(layout, {3, 4, 5}, w, true), 2u);
  EXPECT_THROW(hostPushersPerServer(layout, {3, 4, 5}, 6, true), Error);
}

// A push that never leaves the queue (its server never answers the one
// ahead of it) is named when the deadline passes, and the wait ends.
TEST(PushWindow, AServerThatNeverTakesThePushAheadIsNamed) {
  HandServer server;
  const KeyLayout layout = buildKeyLayout({{"a", 4}, {"b", 4}}, 1, 16);
  Worker w({{{server.endpoint, "ps 0"}}, layout, Mode::PsSync, 0, WireDtype::kFloat32, 16}, tandem::testing::testSecurity());
  std::vector<float> g(4, 1.0f);
  w.push(1, g.data(), 0);
  w.push(0, g.data(), 0);
  const auto started = Clock::now();
  try {
    w.receivePulls(Deadline::afterSeconds(0.3), 0, [](size_t, const PulledValues&) {});
    FAIL() << "a pull queued behind an unanswered push was received";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("ps 0 did not take the pushes ahead of the pull of chunk 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(2));
}

}  // namespace
}  // namespace tandem::ps::testing

namespace tandem::ps::testing {
namespace {

ServerConfig groupedConfig(std::vector<std::vector<int>> groups, Mode mode = Mode::PsSync) {
  ServerConfig c = makeConfig(mode, 4, {{0, 4}, {1, 4}, {2, 4}});
  c.push_groups = std::move(groups);
  return c;
}

// Hierarchical aggregation: chunk k of each host is pushed by group[k % size].
TEST(PushGroups, EachHostPushesEachChunkThroughOneWorker) {
  const ServerConfig c = groupedConfig({{0, 1}, {2, 3}});
  EXPECT_EQ(pushersOf(c, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(pushersOf(c, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(pushersOf(c, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(pushersOf(groupedConfig({}), 1), (std::vector<int>{0, 1, 2, 3}));  // flat
  // The JSON the chief sends round-trips.
  EXPECT_EQ(serverConfigFromJson(toJson(c), "chief").push_groups, c.push_groups);
}

// Quantised pushes travel in ps-init; other widths are refused, naming the field.
TEST(PushBitsConfig, RoundTripsAndOtherWidthsAreRefused) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 4}});
  EXPECT_EQ(serverConfigFromJson(toJson(c), "chief").push_bits, 0);
  c.push_bits = 4;
  EXPECT_EQ(serverConfigFromJson(toJson(c), "chief").push_bits, 4);
  EXPECT_EQ(serverConfigFromJson(toJson(c), "chief").pushFormat().name(), "int4");
  auto odd = toJson(c);
  odd["push_bits"] = 5;
  try {
    serverConfigFromJson(odd, "chief");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("chief: ps-init: push_bits 5: expected 8 or 4"), std::string::npos)
        << e.what();
  }
}

// Delay compensation travels in ps-init, and only async or SSP servers take it.
TEST(DelayCompensationConfig, RoundTripsAndSyncServersRefuseIt) {
  ServerConfig c = makeConfig(Mode::PsAsync, 2, {{0, 4}});
  c.delay_compensation = 0.04;
  EXPECT_DOUBLE_EQ(serverConfigFromJson(toJson(c), "chief").delay_compensation, 0.04);
  EXPECT_EQ(serverConfigFromJson(toJson(c), "chief").delay_form, DelayForm::kAdaptive);
  c.delay_form = DelayForm::kConstant;
  EXPECT_EQ(serverConfigFromJson(toJson(c), "chief").delay_form, DelayForm::kConstant);
  auto unknown = toJson(c);
  unknown["delay_compensation_form"] = "linear";
  EXPECT_THROW(serverConfigFromJson(unknown, "chief"), InputError);
  c.mode = Mode::PsSync;
  try {
    serverConfigFromJson(toJson(c), "chief");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("delay_compensation needs async or bounded-staleness mode"),
              std::string::npos)
        << e.what();
  }
  c.mode = Mode::PsAsync;
  c.delay_compensation = -1;
  EXPECT_THROW(serverConfigFromJson(toJson(c), "chief"), InputError);
  c.delay_compensation = 0;
  c.staleness_lr = true;
  EXPECT_TRUE(serverConfigFromJson(toJson(c), "chief").staleness_lr);
  c.momentum_correction = true;
  EXPECT_TRUE(serverConfigFromJson(toJson(c), "chief").momentum_correction);
  c.delay_compensation = 2;  // the two are not combined
  EXPECT_THROW(serverConfigFromJson(toJson(c), "chief"), InputError);
  c.delay_compensation = 0;
  c.staleness_lr = false;  // it corrects for the staleness those rates measure
  EXPECT_THROW(serverConfigFromJson(toJson(c), "chief"), InputError);
  c.momentum_correction = false;
  c.staleness_lr = true;
  c.mode = Mode::PsSync;
  EXPECT_THROW(serverConfigFromJson(toJson(c), "chief"), InputError);
}

TEST(PushGroups, GroupsThatDoNotCoverEveryWorkerOnceAreRefused) {
  auto refused = [](std::vector<std::vector<int>> groups, Mode mode, const std::string& needle) {
    try {
      serverConfigFromJson(toJson(groupedConfig(std::move(groups), mode)), "chief");
      ADD_FAILURE() << "accepted; wanted " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({{0, 1}, {1, 2, 3}}, Mode::PsSync, "repeated");
  refused({{0, 1}, {2}}, Mode::PsSync, "leave a worker out");
  refused({{0, 1}, {2, 7}}, Mode::PsSync, "out of range");
  refused({{0, 1}, {}}, Mode::PsSync, "empty group");
  refused({{0, 1}, {2, 3}}, Mode::PsAsync, "need sync mode");
}

// A push from a worker that is not the chunk's pusher is refused, naming
// who pushes it; the server keeps the step waiting for the right one.
TEST(PushGroups, AServerRefusesAPushFromAWorkerThatIsNotTheChunksPusher) {
  Job job(Mode::PsSync);
  auto configs = job.configs(2);
  for (auto& c : configs) c.push_groups = {{0, 1}};  // one host: chunk k from worker k % 2
  const Deadline deadline = Deadline::afterSeconds(5);
  Worker chief = job.worker(0);
  chief.initServers(configs, [&](size_t c, int64_t&) { return initial(job.layout, c); }, deadline);
  chief.hello(deadline);
  const std::vector<float> g(4, 1.0f);
  chief.push(1, g.data(), 0);  // chunk 1 is worker 1's
  try {
    chief.awaitPushes(deadline, 0);
    FAIL() << "worker 0's push of chunk 1 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pushes through worker(s) 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::ps::testing
