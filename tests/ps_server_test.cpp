// ParameterServer, in-process: sync and async applies, step clocks (sync
// barrier, SSP bound, expiry). Harness: tests/support/ps_server_harness.hpp.
#include <gtest/gtest.h>

#include "ps/messages.hpp"
#include "support/ps_server_harness.hpp"
#include "support/test_security.hpp"

namespace tandem::ps::testing {
namespace {

TEST_F(PsServer, SyncSumsBothWorkersAndHoldsPullsUntilTheStepIsApplied) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 5}, {7, 3}});
  c.optimizer.name = "sgd";
  c.optimizer.momentum = 0.9;
  start(c);
  Peer w0 = worker(0), w1 = worker(1);

  // What the server must compute, from the same kernel.
  auto param = initial(c.chunks[0]);
  std::vector<float> momentum(param.size());
  auto step = [&](const std::vector<float>& g0, const std::vector<float>& g1, uint64_t t) {
    std::vector<float> sum(g0.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = g0[i] + g1[i];  // worker order
    const optim::SgdSettings s{c.lr_by_step[t], c.optimizer.momentum, c.optimizer.weight_decay, c.optimizer.nesterov};
    optim::sgdUpdate(param, sum, momentum, t == 0, s);
  };

  // Step 0, chunk 0: worker 0 pushes and asks for version 1 at once.
  const auto g00 = pattern(5, 0.01f, -0.02f), g10 = pattern(5, -0.03f, 0.011f);
  expectOk(w0.await(push(w0, 0, 0, g00)));
  const uint64_t early = pull(w0, 0, 1);
  EXPECT_FALSE(w0.answered(early)) << "version 1 served before worker 1 pushed step 0";
  // Worker 1's push of step 0 releases the pull.
  expectOk(w1.await(push(w1, 0, 0, g10)));
  Frame v1 = w0.await(early);
  ASSERT_EQ(v1.header.type, ps::msg::kValues) << v1.text();
  EXPECT_EQ(v1.header.clock, 1u);
  EXPECT_EQ(v1.header.key_begin, 0u);
  step(g00, g10, 0);
  expectBitEqual(floatsOf(v1), param);  // param - lr * (g0 + g1): the momentum buffer starts as the gradient

  // A second push for a step already applied is refused, naming both steps.
  expectError(w0.request(header(ps::msg::kPush, 0, 0), g00), "for step 0 but the chunk is at step 1");
  // So is a second push for the same step.
  const auto g01 = pattern(5, 0.02f, 0.005f), g11 = pattern(5, 0.017f, -0.04f);
  expectOk(w0.await(push(w0, 0, 1, g01)));
  expectError(w0.request(header(ps::msg::kPush, 0, 1), g01), "twice for step 1");

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
  ServerConfig c = makeConfig(Mode::PsAsync, 2, {{3, 6}});
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
  ASSERT_EQ(v.header.type, ps::msg::kValues) << v.text();
  EXPECT_EQ(v.header.clock, 3u);

  auto param = initial(c.chunks[0]);
  std::vector<float> m(param.size()), s(param.size());
  int64_t update = 0;
  for (const auto* g : {&g0, &g1, &g2}) {
    // Async runs the schedule over the global step: every push is one.
    const optim::AdamSettings a{c.lrAt(static_cast<uint64_t>(update)), c.optimizer.beta1, c.optimizer.beta2, c.optimizer.eps,
                         c.optimizer.weight_decay};
    optim::adamUpdate(param, *g, m, s, ++update, a);
  }
  expectBitEqual(floatsOf(v), param);
}

// --- 3. clocks --------------------------------------------------------------

TEST_F(PsServer, SyncClockIsABarrierWithTheMeanLoss) {
  start(makeConfig(Mode::PsSync, 2, {{0, 2}}));
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
  expectError(w0.request({.type = ps::msg::kClock, .clock = 3}, encode(StepReport{})),
              "reported step 3 finished, but its last report was step 1");
  sayGoodbye(w0);
  // A finished worker holds nobody back.
  StepAgreement alone = agreementOf(w1.await(reportClock(w1, 2, {.loss = 3.0})));
  EXPECT_EQ(alone.loss, 3.0);
  sayGoodbye(w1);
  EXPECT_EQ(server_->summary()["max_staleness"], 0);
}

TEST_F(PsServer, SspLetsAWorkerRunOneStepAhead) {
  ServerConfig c = makeConfig(Mode::Ssp, 2, {{0, 2}});
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

  sayGoodbye(w0);
  sayGoodbye(w1);
  const auto summary = server_->summary();
  EXPECT_EQ(summary["max_staleness"], 1);
  EXPECT_EQ(summary["mode"], "ps-ssp");
}

TEST_F(PsServer, AsyncClockNeverWaits) {
  start(makeConfig(Mode::PsAsync, 2, {{0, 2}}));
  Peer w0 = worker(0);
  worker(1);  // says hello, then never reports
  for (uint32_t step = 1; step <= 4; ++step) {
    StepAgreement a = agreementOf(w0.await(reportClock(w0, step, {.loss = static_cast<double>(step)})));
    EXPECT_EQ(a.slowest_clock, 0u);
    EXPECT_EQ(a.loss, static_cast<double>(step));
  }
}

TEST_F(PsServer, AClockWaitExpiresNamingTheLateWorker) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 2}});
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

// --- 4. the chief's next start -----------------------------------------------

// A chief that failed and started again re-initialises the servers that
// survived: only an init naming the start that initialised this server is
// taken, and the server then forgets that start's state entirely.
TEST_F(PsServer, TheChiefsNextStartAfterAFailureStartsTheServerOverAndNoOtherInitDoes) {
  ServerConfig c = makeConfig(Mode::PsSync, 2, {{0, 4}});
  c.optimizer.name = "sgd";
  c.optimizer.momentum = 0.9;
  c.generation = 0xA1;
  start(c);
  auto joined = [&](uint32_t index, uint64_t generation) {
    Peer p(context_, server_->endpoint());
    expectOk(hello(p, index, kFingerprint, generation));
    return p;
  };
  {
    Peer w0 = joined(0, 0xA1), w1 = joined(1, 0xA1);
    expectOk(w0.await(push(w0, 0, 0, pattern(4, 0.1f, 0.2f))));
    expectOk(w1.await(push(w1, 0, 0, pattern(4, -0.3f, 0.05f))));
    EXPECT_EQ(w0.await(pull(w0, 0, 1)).header.clock, 1u);
    // Half of step 1, and a pull held for it, when the job fails.
    expectOk(w0.await(push(w0, 0, 1, pattern(4, 0.2f, 0.1f))));
    const uint64_t held = pull(w0, 0, 2);
    EXPECT_FALSE(w0.answered(held));
  }
  net::RequestClient chief(context_, server_->endpoint(), "ps 0", ps::kMessages, tandem::testing::testSecurity());
  auto initWith = [&](uint64_t generation, uint64_t replaces) {
    ServerConfig next = c;
    next.generation = generation;
    next.replaces = replaces;
    auto reply = chief.request({.type = ps::msg::kInit}, net::copyPayload(toJson(next).dump()),
                               Deadline::after(kReplyBudget));
    if (!reply) throw std::runtime_error("no reply to ps-init");
    return std::move(*reply);
  };
  // Another job's chief, and a start that replaces some other start.
  expectError(initWith(0xB2, 0), "already initialised (by another start of the chief, 00000000000000a1)");
  expectError(initWith(0xB2, 0xC3), "already initialised");
  // A worker of the next start says hello before its chief's init: it is
  // answered once that init has arrived, not refused as a second worker 1.
  Peer early(context_, server_->endpoint());
  const uint64_t early_hello = early.send({.type = ps::msg::kHello}, encode(Hello{1, kFingerprint, 0xB2}));
  EXPECT_FALSE(early.answered(early_hello));
  // A next start with a malformed layout is refused before anything changes.
  {
    ServerConfig bad = c;
    bad.generation = 0xB2;
    bad.replaces = 0xA1;
    bad.chunks.push_back(bad.chunks[0]);
    auto reply = chief.request({.type = ps::msg::kInit}, net::copyPayload(toJson(bad).dump()),
                               Deadline::after(kReplyBudget));
    ASSERT_TRUE(reply.has_value());
    expectError(*reply, "lists chunk 0 twice");
    expectError(initWith(0xB2, 0xC3), "already initialised (by another start of the chief, 00000000000000a1)");
  }
  // The next start: values as at the checkpoint, step 0 again.
  expectOk(initWith(0xB2, 0xA1));
  const auto values = initial(c.chunks[0]);
  auto set = chief.request(header(ps::msg::kSet, 0), net::copyPayload(values.data(), values.size() * 4),
                           Deadline::after(kReplyBudget));
  ASSERT_TRUE(set.has_value());
  expectOk(*set);
  // New workers of the same indexes are welcome (sync refuses a second
  // connection of a known worker); the chunk is at step 0 with fresh slots.
  expectOk(early.await(early_hello));
  Peer n0 = joined(0, 0xB2), &n1 = early;
  const auto g0 = pattern(4, 0.05f, -0.1f), g1 = pattern(4, 0.02f, 0.03f);
  expectOk(n0.await(push(n0, 0, 0, g0)));
  expectOk(n1.await(push(n1, 0, 0, g1)));
  Frame v = n0.await(pull(n0, 0, 1));
  ASSERT_EQ(v.header.type, ps::msg::kValues) << v.text();
  EXPECT_EQ(v.header.clock, 1u);
  auto param = values;
  std::vector<float> sum(4), momentum(4);
  for (size_t i = 0; i < 4; ++i) sum[i] = g0[i] + g1[i];
  optim::sgdUpdate(param, sum, momentum, true, {c.lrAt(0), c.optimizer.momentum, c.optimizer.weight_decay, false});
  expectBitEqual(floatsOf(v), param);
  // The start it replaced cannot be replaced again.
  expectError(initWith(0xD4, 0xA1), "already initialised (by another start of the chief, 00000000000000b2)");
}

}  // namespace
}  // namespace tandem::ps::testing
