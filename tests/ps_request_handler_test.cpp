// The parameter server's request handler driven as its I/O loop drives it,
// with no socket, no thread and no sleep: requests in, replies and applies
// out, the time injected.
#include "ps/request_handler.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "ps/messages.hpp"

// Its own namespace: the unity build compiles it beside ps_chunk_store_test's helpers.
namespace tandem::ps::handler_test {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kKey = 7;
constexpr uint64_t kLayout = 0xabc;
const std::vector<float> kInitial{1.0f, 2.0f, 3.0f};

ServerConfig configFor(Mode mode, int workers, uint64_t generation = 1, uint64_t replaces = 0) {
  ServerConfig c;
  c.mode = mode;
  c.workers = workers;
  c.lr_by_step = {0.5};
  c.layout_fingerprint = kLayout;
  c.chunks = {{kKey, static_cast<int64_t>(kInitial.size())}};
  c.peer_timeout_s = 5;
  c.generation = generation;
  c.replaces = replaces;
  return c;
}

OwnedBytes bytesOf(const void* data, size_t size) { return copyBytes(data, size); }
OwnedBytes bytesOf(const std::vector<float>& v) { return copyBytes(v.data(), v.size() * sizeof(float)); }
OwnedBytes bytesOf(const std::vector<char>& v) { return copyBytes(v.data(), v.size()); }
OwnedBytes gradient(std::vector<float> v) { return bytesOf(v); }

Request request(const std::string& routing, net::MessageType type, uint64_t id, OwnedBytes payload = {},
                uint32_t clock = 0) {
  return {.routing = routing,
          .header = {.type = type, .clock = clock, .request_id = id, .key_begin = kKey, .key_end = kKey + 1},
          .payload = std::move(payload)};
}

std::string textOf(const Reply& r) { return std::string(r.payload.text()); }

std::vector<float> floatsIn(const Reply& r) {
  std::vector<float> out(r.payload.size() / sizeof(float));
  std::memcpy(out.data(), r.payload.data(), r.payload.size());
  return out;
}

// One reply, to `routing`, of `type`; its text when that is an error.
void expectOne(const Outbox& out, const std::string& routing, net::MessageType type, uint64_t id) {
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(out.replies[0].routing, routing);
  EXPECT_EQ(out.replies[0].header.type, type) << textOf(out.replies[0]);
  EXPECT_EQ(out.replies[0].header.request_id, id);
}

// The chief's init and set, then a hello from every worker ("w0", "w1"...).
RequestHandler started(const ServerConfig& config, Clock::time_point now) {
  RequestHandler h({.index = 0});
  expectOne(h.handle(request("w0", msg::kInit, 1, bytesOf(toJson(config).dump().data(), toJson(config).dump().size())),
                     now),
            "w0", net::MessageType::kOk, 1);
  expectOne(h.handle(request("w0", msg::kSet, 2, bytesOf(kInitial)), now), "w0", net::MessageType::kOk, 2);
  for (int w = 0; w < config.workers; ++w) {
    const Hello hello{.worker = static_cast<uint32_t>(w), .layout_fingerprint = kLayout, .generation = config.generation};
    const std::string routing = "w" + std::to_string(w);
    const Outbox out = h.handle(request(routing, msg::kHello, 10 + w, bytesOf(encode(hello))), now);
    expectOne(out, routing, net::MessageType::kOk, 10 + w);
    const HelloAnswer answer = decodeHelloAnswer(out.replies[0].payload.bytes, "ps 0");
    EXPECT_FALSE(answer.arena_mapped) << "mapped shared memory that was never offered";
  }
  EXPECT_TRUE(h.initialised());
  return h;
}

TEST(RequestHandler, ASyncStepIsAppliedOnceEveryWorkerPushedAndReleasesTheHeldPull) {
  const auto t0 = Clock::now();
  RequestHandler h = started(configFor(Mode::PsSync, 2), t0);
  Outbox pull = h.handle(request("w0", msg::kPull, 20, {}, 1), t0);
  EXPECT_TRUE(pull.replies.empty()) << "step 1's values before step 0 was pushed";
  Outbox first = h.handle(request("w0", msg::kPush, 21, gradient({1, 1, 1})), t0);
  expectOne(first, "w0", net::MessageType::kOk, 21);
  EXPECT_TRUE(first.applies.empty()) << "applied with worker 1's push missing";
  Outbox second = h.handle(request("w1", msg::kPush, 22, gradient({3, 3, 3})), t0);
  expectOne(second, "w1", net::MessageType::kOk, 22);
  ASSERT_EQ(second.applies.size(), 1u);
  EXPECT_TRUE(h.applying());
  h.apply(second.applies[0]);  // the pool's part
  const Outbox done = h.applied(second.applies[0].chunk, 0.001);
  EXPECT_FALSE(h.applying());
  expectOne(done, "w0", msg::kValues, 20);
  EXPECT_EQ(done.replies[0].header.clock, 1u);
  const std::vector<float> expected{1 - 0.5f * 4, 2 - 0.5f * 4, 3 - 0.5f * 4};
  EXPECT_EQ(floatsIn(done.replies[0]), expected);
  const nlohmann::json summary = h.summary(1.0);
  EXPECT_EQ(summary["pushes"], 2);
  EXPECT_EQ(summary["pulls"], 1);
  EXPECT_EQ(summary["chunk_updates"], 1);
}

// A replacement for a lost server (--ps-replicas 2): fresh, it tells
// anyone so; the chief sets it up at the step the job is at, values and
// clock as the other holder has them, and it serves the next step.
TEST(RequestHandler, AReplacementSaysItIsFreshThenGoesOnFromTheStepItIsSetUpAt) {
  const auto t0 = Clock::now();
  RequestHandler h({.index = 0});
  const Outbox fresh = h.handle(request("probe", msg::kStatus, 1), t0);
  expectOne(fresh, "probe", net::MessageType::kOk, 1);
  EXPECT_FALSE(decodeServerStatus(fresh.replies[0].payload.bytes, "ps 0").initialised);

  ServerConfig config = configFor(Mode::PsSync, 2);
  config.start_step = 5;
  const std::string json = toJson(config).dump();
  expectOne(h.handle(request("w0", msg::kInit, 2, bytesOf(json.data(), json.size())), t0), "w0",
            net::MessageType::kOk, 2);
  expectOne(h.handle(request("w0", msg::kSet, 3, bytesOf(kInitial), 5), t0), "w0", net::MessageType::kOk, 3);
  const Outbox set_up = h.handle(request("probe", msg::kStatus, 4), t0);
  EXPECT_TRUE(decodeServerStatus(set_up.replies.at(0).payload.bytes, "ps 0").initialised);
  for (int w = 0; w < 2; ++w) {
    const Hello hello{.worker = static_cast<uint32_t>(w), .layout_fingerprint = kLayout, .generation = 1};
    const Outbox out = h.handle(request("w" + std::to_string(w), msg::kHello, 10 + w, bytesOf(encode(hello))), t0);
    expectOne(out, "w" + std::to_string(w), net::MessageType::kOk, 10 + w);
    EXPECT_EQ(decodeHelloAnswer(out.replies[0].payload.bytes, "ps 0").clock, 5u) << "every worker's clock is the step";
  }
  EXPECT_TRUE(h.handle(request("w0", msg::kPull, 20, {}, 6), t0).replies.empty()) << "step 6 before its pushes";
  h.handle(request("w0", msg::kPush, 21, gradient({1, 1, 1}), 5), t0);
  Outbox second = h.handle(request("w1", msg::kPush, 22, gradient({3, 3, 3}), 5), t0);
  ASSERT_EQ(second.applies.size(), 1u);
  h.apply(second.applies[0]);
  const Outbox done = h.applied(second.applies[0].chunk, 0.001);
  expectOne(done, "w0", msg::kValues, 20);
  EXPECT_EQ(done.replies[0].header.clock, 6u);
  EXPECT_EQ(floatsIn(done.replies[0]), (std::vector<float>{1 - 0.5f * 4, 2 - 0.5f * 4, 3 - 0.5f * 4}));
}

TEST(RequestHandler, RefusesWithAnErrorReplyAndKeepsServing) {
  const auto t0 = Clock::now();
  RequestHandler h({.index = 1});
  expectOne(h.handle(request("x", msg::kPush, 5, gradient({1, 1, 1})), t0), "x", net::MessageType::kError, 5);
  Outbox early = h.handle(request("x", msg::kPush, 5), t0);
  EXPECT_EQ(textOf(early.replies.at(0)), "ps-push before ps-hello: say which worker you are first");
  Request named = request("x", msg::kClock, 6);
  named.header.flags = net::kFlagInArena;
  EXPECT_EQ(textOf(h.handle(named, t0).replies.at(0)), "ps-clock cannot name shared memory");
  EXPECT_EQ(textOf(h.handle(request("x", msg::kValues, 7), t0).replies.at(0)),
            "ps-values is not a parameter-server request");
  const Outbox bad = h.refuseFrame("x", 8, "frame from x: bad magic");
  expectOne(bad, "x", net::MessageType::kError, 8);
  EXPECT_EQ(textOf(bad.replies[0]), "frame from x: bad magic");
  EXPECT_EQ(h.summary(1.0)["bad_frames"], 5);
  EXPECT_FALSE(h.initialised());
}

// Timeouts run on the time they are given: a held pull fails exactly at the
// peer timeout after it arrived, naming the push that is missing.
TEST(RequestHandler, AHeldPullFailsAtThePeerTimeoutOfTheInjectedClock) {
  const auto t0 = Clock::now();
  RequestHandler h = started(configFor(Mode::PsSync, 2), t0);
  h.handle(request("w1", msg::kPush, 30, gradient({1, 1, 1})), t0);
  EXPECT_TRUE(h.handle(request("w1", msg::kPull, 31, {}, 1), t0).replies.empty());
  EXPECT_TRUE(h.tick(t0 + 4999ms).out.replies.empty()) << "failed before the peer timeout";
  const RequestHandler::Tick late = h.tick(t0 + 5s);
  expectOne(late.out, "w1", net::MessageType::kError, 31);
  const std::string text = textOf(late.out.replies[0]);
  EXPECT_NE(text.find("ps 0: pull of chunk 7 waited 5s (--peer-timeout); no push of step 0 from worker 0"),
            std::string::npos)
      << text;
}

// The chief's next start arrives while its previous start's apply runs:
// nothing changes until the loop reports the apply done and hands the init
// back; then the server starts over.
TEST(RequestHandler, AStartOverWaitsForRunningAppliesThroughTheLoop) {
  const auto t0 = Clock::now();
  RequestHandler h = started(configFor(Mode::PsAsync, 1, /*generation=*/1), t0);
  Outbox push = h.handle(request("w0", msg::kPush, 40, gradient({1, 1, 1})), t0);
  ASSERT_EQ(push.applies.size(), 1u);
  const ServerConfig next = configFor(Mode::PsAsync, 1, /*generation=*/2, /*replaces=*/1);
  const std::string json = toJson(next).dump();
  const Request init = request("w0b", msg::kInit, 41, bytesOf(json.data(), json.size()));
  const Outbox wait = h.handle(init, t0);
  EXPECT_TRUE(wait.retry_when_idle);
  EXPECT_TRUE(wait.replies.empty());
  EXPECT_EQ(h.summary(1.0)["started_over"], 0) << "started over under a running apply";
  h.apply(push.applies[0]);
  EXPECT_TRUE(h.applied(push.applies[0].chunk, 0.001).applies.empty());
  const Outbox again = h.handle(init, t0);
  EXPECT_FALSE(again.retry_when_idle);
  expectOne(again, "w0b", net::MessageType::kOk, 41);
  EXPECT_EQ(h.summary(1.0)["started_over"], 1);
  EXPECT_EQ(h.summary(1.0)["chunk_updates"], 0) << "the new start counts from zero";
}

}  // namespace
}  // namespace tandem::ps::handler_test
