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
RequestHandler started(const ServerConfig& config, Clock::time_point now, int index = 0) {
  RequestHandler h({.index = index});
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
  const Outbox done = h.applied(second.applies[0], 0.001);
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
  const Outbox done = h.applied(second.applies[0], 0.001);
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
  EXPECT_TRUE(h.applied(push.applies[0], 0.001).applies.empty());
  const Outbox again = h.handle(init, t0);
  EXPECT_FALSE(again.retry_when_idle);
  expectOne(again, "w0b", net::MessageType::kOk, 41);
  EXPECT_EQ(h.summary(1.0)["started_over"], 1);
  EXPECT_EQ(h.summary(1.0)["chunk_updates"], 0) << "the new start counts from zero";
}

// Async, --ps-replicas 2: the chunk's primary (ps 0) and its backup (ps 1).
ServerConfig replicatedConfig(bool backup, int workers) {
  ServerConfig c = configFor(Mode::PsAsync, workers);
  c.replicas = 2;
  if (backup) {
    c.backup_chunks = {kKey};
  } else {
    c.forward_to = "ipc:///nowhere";
    c.forward_name = "ps 1";
  }
  return c;
}

// The forward as the backup receives it from the primary ("ps0").
Request asReceived(const Forward& f) {
  return {.routing = "ps0", .header = f.header, .payload = bytesOf(f.payload)};
}

// Two workers' pushes reach the primary in one order; it forwards each on
// arrival, with the update number and rate it will apply it with, so both
// holders apply it at once, and acknowledges it once both have (in either
// order). Both hold the same bits after every update.
TEST(RequestHandler, AsyncReplicasApplyEveryPushInThePrimarysOrderBeforeItIsAcknowledged) {
  const auto t0 = Clock::now();
  RequestHandler primary = started(replicatedConfig(false, 2), t0, 0);
  RequestHandler backup = started(replicatedConfig(true, 2), t0, 1);
  ASSERT_NE(primary.destination(0), nullptr);
  EXPECT_EQ(primary.destination(0)->name, "ps 1");
  EXPECT_EQ(backup.destination(0), nullptr);
  const std::vector<std::pair<std::string, std::vector<float>>> pushes = {{"w1", {3, 0, 1}}, {"w0", {1, 2, 0}}};
  uint64_t id = 30;
  for (const auto& [worker, grad] : pushes) {
    Outbox pushed = primary.handle(request(worker, msg::kPush, ++id, gradient(grad)), t0);
    EXPECT_TRUE(pushed.replies.empty()) << "acknowledged before either holder applied it";
    ASSERT_EQ(pushed.applies.size(), 1u);
    ASSERT_EQ(pushed.forwards.size(), 1u) << "not forwarded on arrival";
    const Forward forward = pushed.forwards[0];
    EXPECT_EQ(forward.header.type, msg::kForward);

    // The backup answers once the forward has its place in the chunk's order.
    Outbox taken = backup.handle(asReceived(forward), t0);
    expectOne(taken, "ps0", net::MessageType::kOk, forward.header.request_id);
    ASSERT_EQ(taken.applies.size(), 1u);
    EXPECT_FALSE(taken.applies[0].awaited) << "nobody pulls from the backup";
    backup.apply(taken.applies[0]);
    Outbox applied = backup.applied(taken.applies[0], 0.001);
    EXPECT_TRUE(applied.replies.empty());
    EXPECT_TRUE(applied.forwards.empty()) << "a backup forwards nothing";

    primary.apply(pushed.applies[0]);
    if (id % 2 == 1) {  // the backup answers first
      EXPECT_TRUE(primary.forwarded(forward.id, forward.to, "", false).replies.empty()) << "acknowledged before applied here";
      expectOne(primary.applied(pushed.applies[0], 0.001), worker, net::MessageType::kOk, id);
    } else {  // the primary's apply ends first
      EXPECT_TRUE(primary.applied(pushed.applies[0], 0.001).replies.empty()) << "acknowledged before the backup";
      expectOne(primary.forwarded(forward.id, forward.to, "", false), worker, net::MessageType::kOk, id);
    }
  }
  Outbox a = primary.handle(request("w0", msg::kPull, 50), t0);
  Outbox b = backup.handle(request("w0", msg::kPull, 51), t0);
  ASSERT_EQ(a.replies.size(), 1u);
  ASSERT_EQ(b.replies.size(), 1u);
  EXPECT_EQ(floatsIn(a.replies[0]), floatsIn(b.replies[0]));
  EXPECT_EQ(floatsIn(a.replies[0]), (std::vector<float>{1.0f - 2.0f, 2.0f - 1.0f, 3.0f - 0.5f}));
  EXPECT_EQ(primary.summary(1.0)["forwards_out"], 2);
  EXPECT_EQ(backup.summary(1.0)["forwards_in"], 2);
}

// After the primary died, a worker sends its unanswered push to the backup:
// one it was forwarded already is acknowledged and not applied again. A
// forward out of the primary's order is refused, naming both counts.
TEST(RequestHandler, TheBackupTakesAPushOnceAndRefusesAForwardOutOfOrder) {
  const auto t0 = Clock::now();
  RequestHandler backup = started(replicatedConfig(true, 1), t0, 1);
  const std::vector<float> grad{1, 1, 1};
  const auto bytes = std::as_bytes(std::span(grad));
  Request forward{.routing = "ps0",
                  .header = {.type = msg::kForward, .clock = 4, .request_id = 60, .key_begin = kKey, .key_end = kKey + 1},
                  .payload = bytesOf(encodeForward({.worker = 0, .clock = 4, .update = 0, .lr = 0.5}, bytes))};
  Outbox taken = backup.handle(forward, t0);
  expectOne(taken, "ps0", net::MessageType::kOk, 60);
  ASSERT_EQ(taken.applies.size(), 1u);
  backup.apply(taken.applies[0]);
  EXPECT_TRUE(backup.applied(taken.applies[0], 0.001).replies.empty());

  Outbox again = backup.handle(request("w0", msg::kPush, 61, gradient(grad), 4), t0);
  expectOne(again, "w0", net::MessageType::kOk, 61);
  EXPECT_TRUE(again.applies.empty()) << "applied a push twice";
  EXPECT_EQ(backup.summary(1.0)["repeated_pushes"], 1);

  Outbox next = backup.handle(request("w0", msg::kPush, 62, gradient(grad), 5), t0);
  ASSERT_EQ(next.applies.size(), 1u) << "the worker's next step is a new push";
  EXPECT_TRUE(next.replies.empty()) << "acknowledged before applied";
  backup.apply(next.applies[0]);
  expectOne(backup.applied(next.applies[0], 0.001), "w0", net::MessageType::kOk, 62);

  forward.header.request_id = 63;
  forward.payload = bytesOf(encodeForward({.worker = 0, .clock = 6, .update = 7, .lr = 0.5}, bytes));
  Outbox gap = backup.handle(forward, t0);
  expectOne(gap, "ps0", net::MessageType::kError, 63);
  EXPECT_NE(textOf(gap.replies[0]).find("update 7 arrived where ps 1 holds 2"), std::string::npos)
      << textOf(gap.replies[0]);
}

// The backup lost: every acknowledgement held for it goes out once its
// push is applied here (the primary holds those updates), and later pushes
// are acknowledged once applied here, with nothing forwarded.
TEST(RequestHandler, ALostBackupReleasesTheHeldPushesAndIsForwardedNothingMore) {
  const auto t0 = Clock::now();
  RequestHandler primary = started(replicatedConfig(false, 2), t0, 0);
  Outbox first = primary.handle(request("w0", msg::kPush, 70, gradient({1, 1, 1})), t0);
  Outbox second = primary.handle(request("w1", msg::kPush, 71, gradient({1, 1, 1})), t0);
  ASSERT_EQ(first.applies.size(), 1u);
  ASSERT_TRUE(second.applies.empty()) << "queued behind the first";
  ASSERT_EQ(first.forwards.size(), 1u);
  ASSERT_EQ(second.forwards.size(), 1u);
  primary.apply(first.applies[0]);
  Outbox next = primary.applied(first.applies[0], 0.001);
  EXPECT_TRUE(next.replies.empty()) << "acknowledged before the backup answered";
  ASSERT_EQ(next.applies.size(), 1u) << "the second push's apply";

  Outbox lost = primary.forwarded(first.forwards[0].id, 0, "ps 1 is lost", true);
  expectOne(lost, "w0", net::MessageType::kOk, 70);
  EXPECT_EQ(primary.destination(0), nullptr);
  EXPECT_TRUE(primary.forwarded(second.forwards[0].id, 0, "ps 1 is lost", true).replies.empty())
      << "acknowledged before applied here";
  primary.apply(next.applies[0]);
  expectOne(primary.applied(next.applies[0], 0.001), "w1", net::MessageType::kOk, 71);

  Outbox pushed = primary.handle(request("w0", msg::kPush, 80, gradient({1, 1, 1}), 1), t0);
  ASSERT_EQ(pushed.applies.size(), 1u);
  EXPECT_TRUE(pushed.forwards.empty());
  primary.apply(pushed.applies[0]);
  expectOne(primary.applied(pushed.applies[0], 0.001), "w0", net::MessageType::kOk, 80);
}

// ps 0 died: ps 1 holds the chunk alone and takes the workers' pushes.
// ps 0's replacement is initialised, and the chief asks ps 1 to bring it
// up while an apply runs with a push queued behind it. ps 1 copies the
// chunk between the two applies, forwards the queued push and every later
// one (each acknowledged once both hold it), and mirrors the step clocks.
// The replacement ends with the same bits, and once ps 1 is gone it
// answers a report that ps 1 had answered already, asked again, without
// granting the worker a second step.
// With async's defaults (a staleness-aware rate, the momentum corrected for
// the mean staleness), the queued push goes with the terms its arrival decided.
TEST(RequestHandler, AReplacementIsCopiedBetweenTwoAppliesAndGoesOnWithTheSameBits) {
  const auto t0 = Clock::now();
  auto withDefaults = [](ServerConfig c) {
    c.optimizer.momentum = 0.9;
    c.staleness_lr = true;
    c.momentum_correction = true;
    return c;
  };
  RequestHandler holder = started(withDefaults(replicatedConfig(true, 2)), t0, 1);
  RequestHandler fresh({.index = 0});
  ServerConfig config = withDefaults(replicatedConfig(false, 2));
  config.forward_to.clear();
  const std::string json = toJson(config).dump();
  expectOne(fresh.handle(request("chief", msg::kInit, 1, bytesOf(json.data(), json.size())), t0), "chief",
            net::MessageType::kOk, 1);
  auto status = [&] {
    const Outbox out = fresh.handle(request("chief", msg::kStatus, 2), t0);
    return decodeServerStatus(out.replies.at(0).payload.bytes, "ps 0");
  };
  EXPECT_TRUE(status().initialised);
  EXPECT_FALSE(status().ready) << "ready before its chunk was copied";

  Outbox first = holder.handle(request("w0", msg::kPush, 30, gradient({1, 1, 1}), 0), t0);
  Outbox second = holder.handle(request("w1", msg::kPush, 31, gradient({2, 0, 2}), 0), t0);
  ASSERT_EQ(first.applies.size(), 1u);
  ASSERT_TRUE(second.applies.empty()) << "not queued behind the first";
  expectOne(holder.handle(request("w0", msg::kClock, 32, bytesOf(encode(StepReport{})), 1), t0), "w0",
            msg::kAgreement, 32);

  const ReplicaRequest ask{.server = 0, .endpoint = "ipc:///ps0", .name = "ps 0", .keys = {kKey}};
  Outbox replicate = holder.handle(request("w0", msg::kReplicate, 33, bytesOf(encode(ask))), t0);
  expectOne(replicate, "w0", net::MessageType::kOk, 33);
  ASSERT_EQ(replicate.forwards.size(), 1u) << "copied while an apply changes the chunk";
  EXPECT_EQ(replicate.forwards[0].header.type, msg::kMirror);

  holder.apply(first.applies[0]);
  Outbox between = holder.applied(first.applies[0], 0.001);
  expectOne(between, "w0", net::MessageType::kOk, 30);
  ASSERT_EQ(between.applies.size(), 1u);
  ASSERT_EQ(between.forwards.size(), 2u) << "the copy, then the queued push";
  EXPECT_EQ(between.forwards[0].header.type, msg::kCopy);
  EXPECT_EQ(between.forwards[1].header.type, msg::kForward);
  std::span<const std::byte> rest;
  const ForwardHead queued = decodeForward(std::as_bytes(std::span(between.forwards[1].payload)), "ps 1", rest);
  EXPECT_EQ(queued.staleness, 1u) << "worker 1 pushed on values one update old";
  EXPECT_DOUBLE_EQ(queued.lr, 0.5) << "divided by its staleness of 1";
  EXPECT_DOUBLE_EQ(queued.mean_staleness, 0.5);
  std::vector<Forward> sent = replicate.forwards;
  sent.insert(sent.end(), between.forwards.begin(), between.forwards.end());

  auto take = [&](const Forward& f) {
    Outbox out = fresh.handle(asReceived(f), t0);
    ASSERT_EQ(out.replies.size(), 1u);
    EXPECT_EQ(out.replies[0].header.type, net::MessageType::kOk) << textOf(out.replies[0]);
    for (ApplyJob& job : out.applies) {
      fresh.apply(job);
      fresh.applied(job, 0.001);
    }
  };
  for (const Forward& f : sent) take(f);
  EXPECT_TRUE(status().ready);

  // The queued push is acknowledged once applied here and answered there.
  holder.apply(between.applies[0]);
  EXPECT_TRUE(holder.applied(between.applies[0], 0.001).replies.empty()) << "acknowledged before the replacement";
  expectOne(holder.forwarded(between.forwards[1].id, between.forwards[1].to, "", false), "w1",
            net::MessageType::kOk, 31);
  // Later pushes go on there as they arrive.
  Outbox third = holder.handle(request("w0", msg::kPush, 34, gradient({0, 4, 0}), 1), t0);
  ASSERT_EQ(third.forwards.size(), 1u);
  take(third.forwards[0]);
  holder.apply(third.applies.at(0));
  holder.applied(third.applies[0], 0.001);
  EXPECT_EQ(holder.summary(1.0)["chunk_digests"], fresh.summary(1.0)["chunk_digests"]);
  EXPECT_EQ(fresh.summary(1.0)["chunk_digests"][std::to_string(kKey)]["updates"], 3);

  // ps 1 is gone: worker 0 turns to the replacement and asks its step again.
  const Hello hello{.worker = 0, .layout_fingerprint = kLayout, .generation = config.generation};
  Outbox hi = fresh.handle(request("w0b", msg::kHello, 40, bytesOf(encode(hello))), t0);
  expectOne(hi, "w0b", net::MessageType::kOk, 40);
  EXPECT_EQ(decodeHelloAnswer(hi.replies[0].payload.bytes, "ps 0").clock, 1u) << "the mirrored clock";
  Outbox again = fresh.handle(request("w0b", msg::kClock, 41, bytesOf(encode(StepReport{})), 1), t0);
  expectOne(again, "w0b", msg::kAgreement, 41);
  EXPECT_EQ(fresh.summary(1.0)["global_step"], 1) << "a report asked again counted twice";
  Outbox next = fresh.handle(request("w0b", msg::kClock, 42, bytesOf(encode(StepReport{})), 2), t0);
  expectOne(next, "w0b", msg::kAgreement, 42);
  EXPECT_EQ(fresh.summary(1.0)["global_step"], 2);
  // Worker 1's last reports there (its steps 1 and 2) had not reached the
  // mirror when ps 1 died: its report of step 3 counts them as answered.
  const Hello other{.worker = 1, .layout_fingerprint = kLayout, .generation = config.generation};
  expectOne(fresh.handle(request("w1b", msg::kHello, 43, bytesOf(encode(other))), t0), "w1b", net::MessageType::kOk,
            43);
  Outbox ahead = fresh.handle(request("w1b", msg::kClock, 44, bytesOf(encode(StepReport{})), 3), t0);
  expectOne(ahead, "w1b", msg::kAgreement, 44);
  EXPECT_EQ(fresh.summary(1.0)["global_step"], 5);
  EXPECT_EQ(fresh.summary(1.0)["steps_by_worker"], nlohmann::json({2, 3}));
}

}  // namespace
}  // namespace tandem::ps::handler_test
