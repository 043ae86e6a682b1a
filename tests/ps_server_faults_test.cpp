// ParameterServer, in-process: malformed frames, hellos, and how serve()
// ends (every worker done, silent workers lost, no chief).
#include <gtest/gtest.h>

#include "cluster/store_messages.hpp"
#include "ps/messages.hpp"
#include "support/ps_server_harness.hpp"

namespace tandem::ps::testing {
namespace {

std::vector<char> headerBytes(FrameHeader h) {
  const auto bytes = net::encodeHeader(h);
  std::vector<char> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST_F(PsServer, MalformedFramesGetAnErrorAndOthersAreStillServed) {
  ServerConfig c = makeConfig(Mode::PsSync, 1, {{0, 4}});
  start(c);
  Peer junk = worker();  // never says hello
  Peer w0 = worker(0);
  int bad = 0;
  const std::vector<char> four_floats(16, 0);

  // Truncated header: no request id can be trusted, so the reply carries 0.
  {
    auto h = headerBytes({.type = ps::msg::kPull, .request_id = 901, .key_end = 1});
    h.resize(20);
    junk.sendRaw({h, {}});
    expectError(junk.await(0), "truncated header: 20 of 48 bytes");
    ++bad;
  }
  // Wrong version: the id is salvaged.
  {
    auto h = headerBytes({.type = ps::msg::kPull, .request_id = 902, .key_end = 1});
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
        {.type = ps::msg::kPush, .request_id = 904, .key_end = 1, .payload_bytes = uint64_t{1} << 40});
    junk.sendRaw({h, four_floats});
    expectError(junk.await(904), "exceeds the 64 MiB limit");
    ++bad;
  }
  // A header announcing a payload size other than the one that arrived.
  {
    auto h = headerBytes({.type = ps::msg::kPush, .request_id = 905, .key_end = 1, .payload_bytes = 16});
    junk.sendRaw({h, std::vector<char>(12)});
    expectError(junk.await(905), "announces a payload of 16 bytes but 12 arrived");
    ++bad;
  }
  // Three parts, and one.
  {
    auto h = headerBytes({.type = ps::msg::kPull, .request_id = 906, .key_end = 1});
    junk.sendRaw({h, {}, {'x'}});
    expectError(junk.await(906), "expected 2 message parts (header, payload), got 3");
    h = headerBytes({.type = ps::msg::kPull, .request_id = 907, .key_end = 1});
    junk.sendRaw({h});
    expectError(junk.await(907), "got 1");
    bad += 2;
  }
  // Well-formed frames the server must still refuse.
  expectError(junk.request(header(ps::msg::kPush, 0, 0), four_floats), "ps-push before ps-hello");
  expectError(w0.request(header(ps::msg::kPush, 999, 0), four_floats), "unknown key 999");
  expectError(w0.request(header(ps::msg::kPush, 0, 0), std::vector<char>(12)),
              "carries 12 bytes; the chunk holds 4 values (16 bytes as fp32)");
  expectError(w0.request({.type = ps::msg::kPull, .key_begin = 0, .key_end = 2}), "exactly one chunk");
  expectError(w0.request({.type = ps::msg::kValues}), "ps-values is not a parameter-server request");
  expectError(w0.request({.type = ps::msg::kSet, .key_end = 1}, four_floats), "after training started");
  // Another protocol's message (the coordinator store's) is unknown here.
  expectError(w0.request({.type = cluster::store_msg::kGet}), "unknown message type 17");
  bad += 7;

  // The worker is served as if nothing had happened.
  const auto g = pattern(4, 0.25f, -0.1f);
  expectOk(w0.await(push(w0, 0, 0, g)));
  Frame v = w0.await(pull(w0, 0, 1));
  ASSERT_EQ(v.header.type, ps::msg::kValues) << v.text();
  auto param = initial(c.chunks[0]);
  std::vector<float> momentum(param.size());
  const optim::SgdSettings s{c.lr_by_step[0], c.optimizer.momentum, c.optimizer.weight_decay, c.optimizer.nesterov};
  optim::sgdUpdate(param, g, momentum, true, s);
  expectBitEqual(floatsOf(v), param);

  junk.hangUp();  // the server closes once every connection it knows of is gone
  sayGoodbye(w0);
  const auto summary = server_->summary();
  EXPECT_EQ(summary["bad_frames"], bad);
  EXPECT_EQ(summary["chunk_updates"], 1);
  EXPECT_EQ(summary["pushes"], 1);
}

// --- 5. hello and lifecycle -------------------------------------------------

TEST_F(PsServer, HellosWaitForTheChiefAndAreChecked) {
  start(makeConfig(Mode::PsSync, 2, {{0, 3}, {1, 2}}), {}, /*initialize=*/false);
  Peer early = worker(), wrong_layout = worker(), no_such = worker();
  const uint64_t early_hello = early.send({.type = ps::msg::kHello}, encode(Hello{1, kFingerprint}));
  const uint64_t wrong_hello = wrong_layout.send({.type = ps::msg::kHello}, encode(Hello{0, 0xBAD}));
  EXPECT_FALSE(early.answered(early_hello)) << "hello answered before the chief initialised the server";
  EXPECT_FALSE(wrong_layout.answered(wrong_hello));
  init();
  expectOk(early.await(early_hello));
  expectError(wrong_layout.await(wrong_hello), "computed parameter layout 0000000000000bad but the chief's is");
  expectError(hello(no_such, 5), "worker 5 does not exist: the cluster has 2 worker(s)");
  // Worker 1 is taken by `early`'s socket, and a sync job takes no replacement.
  expectError(hello(no_such, 1), "worker 1 is already connected from another socket; a synchronous job cannot take "
                                 "a replacement worker mid-run");
  // A malformed hello.
  expectError(no_such.request({.type = ps::msg::kHello}, std::vector<char>(3)), "ps-hello payload");
}

// Async jobs are elastic: a new socket saying it is worker 1 takes the
// worker over (the old one died), continuing its clock; the old socket is
// a stranger from then on.
TEST_F(PsServer, AnAsyncJobTakesAReplacementForAWorker) {
  start(makeConfig(Mode::PsAsync, 2, {{0, 2}}));
  Peer w0 = worker(0), old_w1 = worker(1);
  agreementOf(old_w1.request({.type = ps::msg::kClock, .clock = 1}, encode(StepReport{0.5, 0.01, false})));
  Peer replacement = worker();
  const Frame answer = hello(replacement, 1);
  expectOk(answer);
  const HelloAnswer where = decodeHelloAnswer(answer.bytes(), "ps 0");
  EXPECT_EQ(where.clock, 1u) << "the replacement continues its predecessor's clock";
  EXPECT_EQ(where.start_step, 0u);
  expectError(old_w1.request({.type = ps::msg::kClock, .clock = 2}, encode(StepReport{0.5, 0.01, false})),
              "before ps-hello");
  EXPECT_EQ(agreementOf(replacement.request({.type = ps::msg::kClock, .clock = 2},
                                            encode(StepReport{0.5, 0.01, false})))
                .global_step,
            2u);
  sayGoodbye(w0);
  sayGoodbye(replacement);
  ASSERT_TRUE(server_->finishes(std::chrono::seconds(5)));
  const auto summary = server_->summary();
  EXPECT_EQ(summary["rejoined_workers"], 1);
  EXPECT_EQ(summary["steps_by_worker"], nlohmann::json::array({0, 2}));
  EXPECT_EQ(summary["global_step"], 2);
}

// An async checkpoint's snapshot: ps-state with a snapshot point waits for
// every worker's pushes up to its clock there, even one still on the way.
TEST_F(PsServer, ASnapshotWaitsForThePushesOfTheStepsItIncludes) {
  start(makeConfig(Mode::PsAsync, 2, {{0, 3}}));
  Peer chief = worker(0), w1 = worker(1);
  const uint64_t hold = chief.send({.type = ps::msg::kHold});
  // Not answered while worker 1 is mid-step; and the server has the hold
  // before worker 1's report, which comes on another socket.
  EXPECT_FALSE(chief.answered(hold)) << "a hold answered before worker 1 reached a step boundary";
  const uint64_t held = reportClock(w1, 1, StepReport{0.5, 0.01, false});  // its push is late
  const SnapshotPoint point = decodeSnapshotPoint(chief.await(hold).bytes(), 2, "ps 0");
  EXPECT_EQ(point.clocks, (std::vector<uint32_t>{0, 1}));
  EXPECT_FALSE(w1.answered(held)) << "a held report was answered";
  const uint64_t state = chief.send(header(ps::msg::kState, 0), encode(point));
  EXPECT_FALSE(chief.answered(state)) << "the snapshot left out worker 1's push of step 0";
  const std::vector<float> grad{1.0f, 2.0f, 3.0f};
  expectOk(w1.await(push(w1, 0, 0, grad)));
  const auto values = floatsOf(chief.await(state));
  const auto initial = PsServer::initial({0, 3});
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_FLOAT_EQ(values[i], initial[i] - 0.5f * grad[i]) << i;
  expectOk(chief.request({.type = ps::msg::kRelease}));
  EXPECT_EQ(agreementOf(w1.await(held)).global_step, 1u);
  // A point for the wrong number of workers is refused, naming it.
  expectError(chief.request(header(ps::msg::kState, 0), encode(SnapshotPoint{1, {0, 1, 2}})),
              "3 clocks for 2 worker(s)");
  sayGoodbye(chief);
  sayGoodbye(w1);
}

TEST_F(PsServer, ServeReturnsOnceEveryWorkerIsDone) {
  start(makeConfig(Mode::PsSync, 2, {{0, 2}}));
  Peer w0 = worker(0), w1 = worker(1);
  sayGoodbye(w0);
  EXPECT_FALSE(server_->finishes(kQuiet)) << "serve() returned while worker 1 was still there";
  sayGoodbye(w1);
  const auto summary = server_->summary();
  EXPECT_EQ(summary["workers"], 2);
  EXPECT_TRUE(summary["lost_workers"].empty()) << summary.dump();
  EXPECT_EQ(summary["bad_frames"], 0);
}

// libzmq can drop a reply queued just before its socket closes: the server
// keeps the socket open until the workers hung up, so that each goodbye
// reply is read, and waits at most 2 s for one that never hangs up.
TEST_F(PsServer, ClosesOnlyAfterTheWorkersHungUpAndAtMostTwoSecondsLater) {
  start(makeConfig(Mode::PsSync, 2, {{0, 2}}));
  Peer w0 = worker(0), w1 = worker(1);
  sayGoodbye(w0);
  expectOk(w1.request({.type = ps::msg::kDone}));
  EXPECT_FALSE(server_->finishes(300ms)) << "serve() returned while worker 1 could still be reading its reply";
  w1.hangUp();
  EXPECT_TRUE(server_->finishes(1000ms)) << "serve() went on after every worker hung up";

  start(makeConfig(Mode::PsSync, 1, {{0, 2}}));
  Peer stays = worker(0);
  expectOk(stays.request({.type = ps::msg::kDone}));
  const auto since = Clock::now();
  EXPECT_NO_THROW(server_->summary(3500ms));
  EXPECT_GE(secondsSince(since), 1.9);
}

TEST_F(PsServer, ASilentWorkerIsListedAsLost) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 2}});
  c.peer_timeout_s = 0.5;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);
  const auto since = Clock::now();
  sayGoodbye(w0);
  // Worker 1 stays connected, so serve() waits its 2 s for it to hang up.
  const auto summary = server_->summary(3500ms);
  EXPECT_GE(secondsSince(since), 0.4);
  EXPECT_EQ(summary["lost_workers"], nlohmann::json::array({1})) << summary.dump();
}

// Regression (CI, PsTraining.AsyncTrainingSurvivesAKilledWorker): a killed
// worker's connection is gone, so it must not leave its place to another
// that said goodbye and has not hung up yet: serve() waits for that one too.
TEST_F(PsServer, AKilledWorkerDoesNotLetTheServerCloseUnderAGoodbye) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 2}});
  c.peer_timeout_s = 0.5;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);
  w1.hangUp();  // killed: no goodbye; lost after 0.5 s of silence
  expectOk(w0.request({.type = ps::msg::kDone}));
  EXPECT_FALSE(server_->finishes(1200ms)) << "serve() returned while worker 0 could still be reading its reply";
  w0.hangUp();
  EXPECT_TRUE(server_->finishes(1000ms)) << "serve() went on after every worker hung up";
  EXPECT_EQ(server_->summary()["lost_workers"], nlohmann::json::array({1}));
}

// Worker 0 pushes chunk 0 and pulls its update, step after step, for `seconds`.
void trainAlone(Peer& w0, double seconds) {
  const auto g = pattern(2, 0.1f, 0.0f);
  const auto since = Clock::now();
  for (uint32_t step = 0; secondsSince(since) < seconds; ++step) {
    expectOk(w0.await(push(w0, 0, step, g)));
    EXPECT_EQ(w0.await(pull(w0, 0, step + 1)).header.type, ps::msg::kValues);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Regression (lab, 8 hosts x 4 workers, hierarchical, a run past
// --peer-timeout): a worker that pushes none of a server's chunks says
// nothing to it until its goodbye (unless it is ps 0, which gets every
// step's report). Its silence counts only from when the pushers are done
// (WorkerLiveness's tests replay that policy); here the server's wiring:
// lost as the pushers finish would end serve() at once, lost by its own
// silence (while worker 0 trains) would let serve() end the moment worker 0
// says goodbye.
TEST_F(PsServer, AWorkerThatPushesNothingHereIsLostATimeoutAfterItsPushersAreDone) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 2}});
  c.push_groups = {{0, 1}};
  c.peer_timeout_s = 0.4;
  start(c, {.index = 1});
  Peer w0 = worker(0), w1 = worker(1);
  w1.hangUp();
  trainAlone(w0, 0.8);
  const auto done = Clock::now();
  sayGoodbye(w0);
  w0.hangUp();
  EXPECT_TRUE(server_->finishes(std::chrono::milliseconds(2000))) << "serve() waited on for the silent worker";
  EXPECT_GE(secondsSince(done), 0.35);
  EXPECT_EQ(server_->summary()["lost_workers"], nlohmann::json::array({1}));
}

// At ps 0 every worker owes each step's report, so there a silent one is
// given up after one timeout, pusher or not.
TEST_F(PsServer, PsZeroGivesUpASilentWorkerThatPushesNothingThereAfterOneTimeout) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 2}});
  c.push_groups = {{0, 1}};
  c.peer_timeout_s = 0.4;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);
  w1.hangUp();
  trainAlone(w0, 0.8);
  sayGoodbye(w0);
  w0.hangUp();
  EXPECT_TRUE(server_->finishes(std::chrono::milliseconds(200))) << "ps 0 waited for a worker it had given up";
  EXPECT_EQ(server_->summary()["lost_workers"], nlohmann::json::array({1}));
}

// Regression: time a worker spends blocked on the server is not silence.
// Worker 0's pull is held 0.5 s (worker 1 pushes late), then worker 0
// computes 0.5 s: each gap is within the 0.8 s peer timeout, so worker 0
// must not be declared lost even though 1 s passed since it last sent.
TEST_F(PsServer, TimeSpentWaitingOnTheServerIsNotSilence) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 2}});
  c.peer_timeout_s = 0.8;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);
  const auto g = pattern(2, 0.1f, 0.0f);
  expectOk(w0.await(push(w0, 0, 0, g)));
  const uint64_t held = pull(w0, 0, 1);
  EXPECT_FALSE(w0.answered(held, 500ms));  // blocked on worker 1
  expectOk(w1.await(push(w1, 0, 0, g)));
  EXPECT_EQ(w0.await(held).header.type, ps::msg::kValues);
  sayGoodbye(w1);
  // Worker 0 computes for 0.5 s: it must still be served afterwards.
  const bool returned_early = server_->finishes(500ms);
  EXPECT_FALSE(returned_early) << "serve() gave up on worker 0 while it computed after a long pull";
  if (!returned_early) sayGoodbye(w0);
  const auto summary = server_->summary();
  EXPECT_TRUE(summary["lost_workers"].empty()) << summary.dump();
}

// Regression: a pull that can never be answered (a sync worker died before
// pushing) expires after the peer timeout, so serve() returns once every
// worker is gone instead of holding the pull forever.
TEST_F(PsServer, ServeReturnsWhenEveryWorkerDiedEvenWithAPullHeld) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 2}});
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

// A sync worker about to start again in place says so (ps-leave): the step
// and the pulls that wait for it fail at once, naming it, instead of after
// --peer-timeout (30 s here); so does a later report of that start. An
// async job takes the worker back when it returns, so nothing fails there.
TEST_F(PsServer, ASyncWorkerLeavingToStartAgainFailsTheWaitsForItAtOnce) {
  ServerConfig c = makeConfig(Mode::PsSync, 3, {{0, 2}});
  c.peer_timeout_s = 30;
  start(c);
  Peer w0 = worker(0), w1 = worker(1), w2 = worker(2);
  const auto g = pattern(2, 0.1f, 0.0f);
  expectOk(w0.await(push(w0, 0, 0, g)));
  const uint64_t held_pull = pull(w0, 0, 1);
  const uint64_t held_step = reportClock(w0, 1, {});
  EXPECT_FALSE(w0.answered(held_step, 300ms)) << "step 1 ended without workers 1 and 2";
  const auto since = Clock::now();
  expectOk(w1.request({.type = ps::msg::kLeave}));
  expectError(w0.await(held_pull), "worker 1 left to start again in place");
  expectError(w0.await(held_step), "step 1 cannot end: worker 1 left");
  expectError(w2.await(reportClock(w2, 1, {})), "worker 1 left to start again in place");
  EXPECT_LT(secondsSince(since), 1.5);

  start(makeConfig(Mode::PsAsync, 2, {{0, 2}}));
  Peer a0 = worker(0), a1 = worker(1);
  expectOk(a1.request({.type = ps::msg::kLeave}));
  EXPECT_EQ(a0.await(pull(a0, 0, 0)).header.type, ps::msg::kValues);
}

TEST_F(PsServer, ThrowsPeerErrorWhenTheChiefNeverInitialises) {
  start(makeConfig(Mode::PsSync, 1, {{0, 2}}), {.startup_timeout_s = 0.3}, /*initialize=*/false);
  try {
    server_->summary(2000ms);
    ADD_FAILURE() << "serve() returned without an init";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("did not initialise this server"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::ps::testing
