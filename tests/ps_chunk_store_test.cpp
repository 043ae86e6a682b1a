// The parameter server's chunk policy, replayed in chosen orders: pushes,
// pulls, applies and timeouts with no socket, no thread and no sleep.
#include "ps/chunk_store.hpp"

// The pure store works on byte spans: nothing it includes reaches ZeroMQ.
#ifdef CPPZMQ_VERSION
#error "ps/chunk_store.hpp includes ZeroMQ"
#endif

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "ps/messages.hpp"
#include "ps/step_clocks.hpp"
#include "support/ps_refusal.hpp"

namespace tandem::ps {
namespace {

using namespace std::chrono_literals;
using tandem::testing::refusalOf;

constexpr uint64_t kKey = 7;
const std::vector<float> kInitial{1.0f, 2.0f, 3.0f};

// Plain SGD, rate 0.5 at schedule step 0 and 0.25 after; one chunk.
ServerConfig configFor(Mode mode, int workers) {
  ServerConfig c;
  c.mode = mode;
  c.workers = workers;
  c.lr_by_step = {0.5, 0.25};
  c.chunks = {{kKey, static_cast<int64_t>(kInitial.size())}};
  c.peer_timeout_s = 5;
  return c;
}

net::FrameHeader header(net::MessageType type) {
  return {.type = type, .key_begin = kKey, .key_end = kKey + 1};
}

std::span<const std::byte> bytesOf(const std::vector<float>& values) { return std::as_bytes(std::span(values)); }

// A store initialised by `config` whose one chunk holds kInitial.
ChunkStore storeFor(const ServerConfig& config) {
  ChunkStore store("ps 0");
  store.reset(config);
  store.set(0, 0, bytesOf(kInitial));
  EXPECT_TRUE(store.everyChunkSet());
  return store;
}

OwnedBytes gradient(const std::vector<float>& values) { return copyBytes(values.data(), values.size() * sizeof(float)); }

PendingPull pullFrom(int worker, uint64_t request_id, Clock::time_point since = Clock::now(),
                     std::vector<uint32_t> snapshot = {}) {
  PendingPull p;
  p.routing = "w" + std::to_string(worker);
  p.request_id = request_id;
  p.since = since;
  p.worker = worker;
  p.with_state = !snapshot.empty();
  p.snapshot = std::move(snapshot);
  return p;
}

std::vector<float> floatsIn(const Reply& r) {
  std::vector<float> out(r.payload.size() / sizeof(float));
  std::memcpy(out.data(), r.payload.data(), r.payload.size());
  return out;
}

std::string textOf(const Reply& r) { return {static_cast<const char*>(r.payload.data()), r.payload.size()}; }

// Runs the job as the pool would, then returns what its completion releases.
ChunkStore::Applied runApply(ChunkStore& store, std::optional<ApplyJob> job) {
  EXPECT_TRUE(job.has_value());
  if (!job) return {};
  EXPECT_TRUE(store.busy());
  store.apply(*job);
  return store.applied(job->chunk);
}

void expectValues(const Reply& r, const std::vector<float>& expected) {
  EXPECT_EQ(r.header.type, msg::kValues);
  const auto got = floatsIn(r);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], expected[i]) << i;
}

TEST(ChunkStoreSync, HoldsAPullUntilEveryPushersGradientOfTheStepIsApplied) {
  ChunkStore store = storeFor(configFor(Mode::PsSync, 2));
  EXPECT_TRUE(store.pull(0, pullFrom(0, 1), 1).empty()) << "step 1's values before step 0 was applied";
  EXPECT_FALSE(store.push(0, 0, 0, gradient({1, 1, 1}), 0)) << "an apply started with worker 1's push missing";
  EXPECT_TRUE(store.holdsPullOf("w0"));
  auto job = store.push(1, 0, 0, gradient({2, 4, 6}), 0);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->grads.size(), 2u);
  EXPECT_DOUBLE_EQ(job->lr, 0.5);
  EXPECT_TRUE(store.pull(0, pullFrom(1, 2), 1).empty()) << "answered while the apply runs";
  const auto applied = runApply(store, std::move(job));
  ASSERT_EQ(applied.replies.size(), 2u);
  EXPECT_FALSE(applied.next);
  for (const auto& r : applied.replies) {
    EXPECT_EQ(r.header.clock, 1u);
    EXPECT_EQ(r.header.key_begin, kKey);
    expectValues(r, {1 - 0.5f * 3, 2 - 0.5f * 5, 3 - 0.5f * 7});  // the sum of the pre-scaled gradients
  }
  EXPECT_FALSE(store.holdsPullOf("w0"));
  // Step 1 runs at the table's second rate.
  EXPECT_FALSE(store.push(0, 0, 1, gradient({0, 0, 4}), 0));
  EXPECT_DOUBLE_EQ(store.push(1, 0, 1, gradient({0, 0, 0}), 0)->lr, 0.25);
}

// --push-bits 4: each push is decoded from its codes and block scale, the
// workers' sum is taken in float32, and a push of float32's size is refused.
TEST(ChunkStoreSync, DecodesQuantisedPushesBeforeSummingThem) {
  ServerConfig config = configFor(Mode::PsSync, 2);
  config.push_bits = 4;
  ChunkStore store = storeFor(config);
  const PushFormat format = config.pushFormat();
  auto encoded = [&](const std::vector<float>& values) {
    std::vector<std::byte> m(format.bytes(values.size()));
    format.encode(values.data(), nullptr, m.data(), values.size());
    return copyBytes(m.data(), m.size());
  };
  const std::vector<float> plain{1, 2, 3};
  EXPECT_EQ(refusalOf([&] { store.requirePayload(0, msg::kPush, bytesOf(plain), format); }),
            "ps-push of chunk 7 carries 12 bytes; the chunk holds 3 values (6 bytes as int4)");
  EXPECT_FALSE(store.push(0, 0, 0, encoded({7.0f, -3.5f, 1.2f}), 0));  // scale 1: 7, -4, 1
  const auto applied = runApply(store, store.push(1, 0, 0, encoded({0.5f, 0.0f, -3.5f}), 0));  // scale 0.5: 1, 0, -7
  ASSERT_EQ(applied.replies.size(), 0u);
  EXPECT_TRUE(store.pull(0, pullFrom(0, 1), 1).size() == 1);
  const auto replies = store.pull(0, pullFrom(1, 2), 1);
  ASSERT_EQ(replies.size(), 1u);
  expectValues(replies[0], {1 - 0.5f * 7.5f, 2 - 0.5f * -4.0f, 3 - 0.5f * -2.5f});
}

TEST(ChunkStoreSync, RefusesAPushOfAnotherStepATwiceAndANonPusherNamingThem) {
  ChunkStore store = storeFor(configFor(Mode::PsSync, 2));
  EXPECT_EQ(refusalOf([&] { store.push(1, 0, 1, gradient({0, 0, 0}), 0); }),
            "worker 1 pushed chunk 7 for step 1 but the chunk is at step 0");
  store.push(1, 0, 0, gradient({0, 0, 0}), 0);
  EXPECT_EQ(refusalOf([&] { store.push(1, 0, 0, gradient({0, 0, 0}), 0); }),
            "worker 1 pushed chunk 7 twice for step 0");
  // Hierarchical: one host of two workers pushes chunk 7 through worker 7 % 2.
  ServerConfig grouped = configFor(Mode::PsSync, 2);
  grouped.push_groups = {{0, 1}};
  ChunkStore hierarchical = storeFor(grouped);
  EXPECT_EQ(refusalOf([&] { hierarchical.push(0, 0, 0, gradient({0, 0, 0}), 0); }),
            "worker 0 pushed chunk 7, which its host's group pushes through worker(s) 1");
  EXPECT_TRUE(hierarchical.push(1, 0, 0, gradient({0, 0, 0}), 0)) << "the host's one push completes the step";
}

// --ps-replicas 2: a backup may get a fast worker's push of the next step
// before a slow worker's push of this one (the primary already answered
// the fast worker's pull). It keeps the early push and applies it, in the
// same order and sum as the primary, once this step is applied; two steps
// ahead is refused. Each push is acknowledged once its step is applied.
TEST(ChunkStoreSync, ABackupKeepsAPushOfTheNextStepUntilThisOneIsApplied) {
  ServerConfig config = configFor(Mode::PsSync, 2);
  config.replicas = 2;
  config.backup_chunks = {kKey};
  ChunkStore store = storeFor(config);
  ASSERT_TRUE(store.holdsAcks(0));
  auto pushed = [&](int worker, uint32_t step, std::vector<float> grad, uint64_t request_id) {
    auto job = store.push(worker, 0, step, gradient(grad), 0);
    store.holdAck(0, step, "w" + std::to_string(worker), request_id);
    return job;
  };
  auto acks = [](const std::vector<Reply>& replies) {
    std::vector<uint64_t> ids;
    for (const auto& r : replies) {
      if (r.header.type == net::MessageType::kOk) ids.push_back(r.header.request_id);
    }
    return ids;
  };
  EXPECT_FALSE(pushed(0, 0, {1, 1, 1}, 10));
  EXPECT_FALSE(pushed(0, 1, {2, 2, 2}, 11)) << "step 1 applied before step 0";
  EXPECT_EQ(refusalOf([&] { store.push(0, 0, 1, gradient({2, 2, 2}), 0); }), "worker 0 pushed chunk 7 twice for step 1");
  EXPECT_EQ(refusalOf([&] { store.push(0, 0, 2, gradient({0, 0, 0}), 0); }),
            "worker 0 pushed chunk 7 for step 2 but the chunk is at step 0");
  EXPECT_TRUE(store.pull(0, pullFrom(0, 1), 2).empty());
  // The slow worker's step 0, then its step 1 while step 0 applies.
  auto step0 = pushed(1, 0, {3, 3, 3}, 20);
  ASSERT_TRUE(step0);
  EXPECT_FALSE(pushed(1, 1, {4, 4, 4}, 21)) << "kept while step 0 applies";
  const auto first = runApply(store, std::move(step0));
  EXPECT_EQ(acks(first.replies), (std::vector<uint64_t>{10, 20})) << "step 0's pushes, and no pull: it waits for step 1";
  EXPECT_EQ(first.replies.size(), 2u);
  ASSERT_TRUE(first.next) << "step 1 was complete, and starts once step 0 is applied";
  EXPECT_EQ(first.next->update, 1u);
  EXPECT_DOUBLE_EQ(first.next->lr, 0.25);
  EXPECT_TRUE(first.next->awaited) << "the pull of step 2 waits for it";
  const auto second = runApply(store, first.next);
  ASSERT_EQ(second.replies.size(), 3u);
  EXPECT_EQ(acks(second.replies), (std::vector<uint64_t>{11, 21}));
  const float v = 1 - 0.5f * 4 - 0.25f * 6;
  expectValues(second.replies[0], {v, v + 1, v + 2});
  // Without replicas, a push of the next step is refused as before, and acknowledged at once.
  ChunkStore plain = storeFor(configFor(Mode::PsSync, 2));
  EXPECT_FALSE(plain.holdsAcks(0));
  // A primary acknowledges at once, so that its worker's window moves.
  config.backup_chunks.clear();
  EXPECT_FALSE(storeFor(config).holdsAcks(0));
  config.backup_chunks = {kKey + 1};
  EXPECT_EQ(refusalOf([&] { ChunkStore::validate(config); }), "ps-init names chunk 8 a backup but does not list it");
  EXPECT_EQ(refusalOf([&] { plain.push(0, 0, 1, gradient({0, 0, 0}), 0); }),
            "worker 0 pushed chunk 7 for step 1 but the chunk is at step 0");
}

TEST(ChunkStore, RefusesRequestsForChunksItDoesNotHold) {
  ChunkStore store("ps 1");
  EXPECT_EQ(refusalOf([&] { store.indexOf(header(msg::kPull)); }),
            "ps 1 has not been initialised by the chief yet");
  ServerConfig twice = configFor(Mode::PsSync, 1);
  twice.chunks.push_back(twice.chunks[0]);
  EXPECT_EQ(refusalOf([&] { ChunkStore::validate(twice); }), "ps-init lists chunk 7 twice");
  EXPECT_EQ(refusalOf([&] { store.reset(twice); }), "ps-init lists chunk 7 twice");
  EXPECT_FALSE(store.initialized()) << "a refused init changed the store";
  store.reset(configFor(Mode::PsSync, 1));
  net::FrameHeader other = header(msg::kPull);
  other.key_begin = other.key_end = 8;
  ++other.key_end;
  EXPECT_EQ(refusalOf([&] { store.indexOf(other); }), "unknown key 8: ps 1 does not hold that chunk");
  other.key_begin = kKey;
  EXPECT_EQ(refusalOf([&] { store.indexOf(other); }), "ps-pull covers keys [7, 9); requests name exactly one chunk");
  EXPECT_EQ(refusalOf([&] { store.requirePayload(0, msg::kPush, bytesOf({1, 2}), PushFormat{WireDtype::kBfloat16}); }),
            "ps-push of chunk 7 carries 8 bytes; the chunk holds 3 values (6 bytes as bf16)");
  EXPECT_EQ(refusalOf([&] { store.set(0, 0, bytesOf({1, 2})); }),
            "ps-set of chunk 7 carries 8 bytes; the chunk holds 3 values (12 bytes as fp32)");
  EXPECT_FALSE(store.everyChunkSet());
}

TEST(ChunkStoreAsync, AppliesOnePushAtATimeInArrivalOrderAndAWorkerSeesItsOwnPush) {
  ChunkStore store = storeFor(configFor(Mode::PsAsync, 2));
  auto first = store.push(0, 0, 0, gradient({2, 2, 2}), 11);
  ASSERT_TRUE(first);
  EXPECT_DOUBLE_EQ(first->lr, 0.5);  // the job's global step 0
  EXPECT_FALSE(store.push(1, 0, 0, gradient({4, 0, 0}), 12)) << "two applies of one chunk at once";
  EXPECT_TRUE(store.pull(0, pullFrom(1, 5), 0).empty()) << "worker 1 was answered before its own push was applied";
  auto after_first = runApply(store, std::move(first));
  EXPECT_TRUE(after_first.replies.empty());
  ASSERT_TRUE(after_first.next) << "the queued push did not start once the chunk was free";
  EXPECT_DOUBLE_EQ(after_first.next->lr, 0.25);  // global step 1
  ASSERT_EQ(after_first.next->arrivals.size(), 1u);
  EXPECT_EQ(after_first.next->arrivals[0], (std::pair<int, int64_t>{1, 12}));
  const auto after_second = runApply(store, std::move(after_first.next));
  ASSERT_EQ(after_second.replies.size(), 1u);
  EXPECT_EQ(after_second.replies[0].header.request_id, 5u);
  EXPECT_EQ(after_second.replies[0].header.clock, 2u);
  expectValues(after_second.replies[0], {1 - 0.5f * 2 - 0.25f * 4, 2 - 0.5f * 2, 3 - 0.5f * 2});
  EXPECT_FALSE(store.busy());
}

// DC-ASGD: every worker starts from the set values; a push is corrected by
// what changed since its worker's last pull, and a pull resets that.
TEST(ChunkStoreAsync, DelayCompensationCorrectsEachPushByWhatChangedSinceItsWorkersPull) {
  ServerConfig config = configFor(Mode::PsAsync, 2);
  config.delay_compensation = 0.5;
  ChunkStore store = storeFor(config);
  // Worker 0 computed on the set values: nothing to correct. SGD at 0.5.
  auto after_first = runApply(store, store.push(0, 0, 0, gradient({1, 1, 1}), 0));
  // Worker 1 computed on the set values too, which moved by -0.5 since.
  const float lambda = 0.5f / std::sqrt(0.95f * 0.05f + 0.05f + 1e-7f);
  const float corrected = 1.0f + lambda * 1.0f * (-0.5f);
  runApply(store, store.push(1, 0, 0, gradient({1, 1, 1}), 0));
  auto answered = store.pull(0, pullFrom(1, 9), 0);
  ASSERT_EQ(answered.size(), 1u);
  expectValues(answered[0], {0.5f - 0.25f * corrected, 1.5f - 0.25f * corrected, 2.5f - 0.25f * corrected});
  EXPECT_LT(corrected, 0.5f) << "the correction does not pull the stale gradient towards the move";
  // Worker 1 has now pulled what is held: its next push is taken as sent.
  const std::vector<float> pulled = floatsIn(answered[0]);
  runApply(store, store.push(1, 0, 1, gradient({2, 2, 2}), 0));
  auto again = store.pull(0, pullFrom(1, 10), 1);
  ASSERT_EQ(again.size(), 1u);
  expectValues(again[0], {pulled[0] - 0.25f * 2, pulled[1] - 0.25f * 2, pulled[2] - 0.25f * 2});
}

// The constant form: lambda0 itself, with no mean square.
TEST(ChunkStoreAsync, ConstantDelayCompensationScalesByLambdaZeroAlone) {
  ServerConfig config = configFor(Mode::PsAsync, 2);
  config.delay_compensation = 0.5;
  config.delay_form = DelayForm::kConstant;
  ChunkStore store = storeFor(config);
  runApply(store, store.push(0, 0, 0, gradient({1, 1, 1}), 0));
  runApply(store, store.push(1, 0, 0, gradient({1, 1, 1}), 0));
  const float corrected = 1.0f + 0.5f * 1.0f * (-0.5f);
  auto answered = store.pull(0, pullFrom(1, 9), 0);
  ASSERT_EQ(answered.size(), 1u);
  expectValues(answered[0], {0.5f - 0.25f * corrected, 1.5f - 0.25f * corrected, 2.5f - 0.25f * corrected});
  EXPECT_TRUE(store.chunks()[0].mean_square.empty());
}

// A compensating server copies a pull's values once: the reply sends the
// worker's record itself. A reply still held (being sent) keeps its values
// when the worker pulls again; a record no reply holds is reused.
TEST(ChunkStoreAsync, APullsRecordIsItsReplyAndAHeldReplyKeepsItsValues) {
  ServerConfig config = configFor(Mode::PsAsync, 2);
  config.delay_compensation = 0.5;
  ChunkStore store = storeFor(config);
  auto first = store.pull(0, pullFrom(1, 1), 0);
  ASSERT_EQ(first.size(), 1u);
  const std::vector<float> set = floatsIn(first[0]);
  EXPECT_EQ(first[0].payload.data(), store.chunks()[0].pulled_by[1]->data()) << "the reply is not the record";
  runApply(store, store.push(0, 0, 0, gradient({1, 1, 1}), 0));
  auto second = store.pull(0, pullFrom(1, 2), 0);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(floatsIn(first[0]), set) << "a reply being sent was overwritten";
  EXPECT_NE(floatsIn(second[0]), set);
  EXPECT_EQ(second[0].payload.data(), store.chunks()[0].pulled_by[1]->data());
  const void* kept = second[0].payload.data();
  first.clear();
  second.clear();  // both sent
  runApply(store, store.push(0, 0, 1, gradient({1, 1, 1}), 0));
  auto third = store.pull(0, pullFrom(1, 3), 0);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].payload.data(), kept) << "a free record was not reused";
  EXPECT_EQ(floatsIn(third[0]), std::vector<float>(store.chunks()[0].param.begin(), store.chunks()[0].param.end()));
}

// Staleness-aware rates: a push's rate is divided by the updates its chunk
// took since its worker pulled, when that is more than one.
TEST(ChunkStoreAsync, StalenessDividesAPushsRateByTheUpdatesSinceItsWorkersPull) {
  ServerConfig config = configFor(Mode::PsAsync, 3);
  config.staleness_lr = true;
  ChunkStore store = storeFor(config);
  runApply(store, store.push(0, 0, 0, gradient({1, 0, 0}), 0));  // fresh: 0.5
  runApply(store, store.push(1, 0, 0, gradient({0, 1, 0}), 0));  // 1 update since its pull: 0.25
  runApply(store, store.push(2, 0, 0, gradient({0, 0, 1}), 0));  // 2 since: 0.25 / 2
  auto answered = store.pull(0, pullFrom(2, 3), 0);
  ASSERT_EQ(answered.size(), 1u);
  expectValues(answered[0], {1 - 0.5f, 2 - 0.25f, 3 - 0.125f});
  // Worker 2 pulled just now: its next push is fresh again.
  runApply(store, store.push(2, 0, 1, gradient({0, 0, 1}), 0));
  auto again = store.pull(0, pullFrom(2, 4), 1);
  ASSERT_EQ(again.size(), 1u);
  expectValues(again[0], {1 - 0.5f, 2 - 0.25f, 3 - 0.125f - 0.25f});
}

// ps 0's hold (an async checkpoint) against worker 1's step report, which
// comes on another socket and so may arrive first or second. Either way the
// snapshot is answered only once the pushes of every step it includes are
// applied, and includes nothing later.
class SnapshotOrder : public ::testing::TestWithParam<bool> {};

TEST_P(SnapshotOrder, ASnapshotHoldsExactlyThePushesOfTheStepsItIncludes) {
  const bool report_first = GetParam();
  const ServerConfig config = configFor(Mode::PsAsync, 2);
  ChunkStore store = storeFor(config);
  StepClocks clocks(config.mode, 0, 2, 0, 100);
  const StepReport report{0.5, 0.01, false};
  // Worker 1 pushes step 0 (held up on the wire: not applied yet), then reports it.
  auto push0 = store.push(1, 0, 0, gradient({2, 0, 0}), 0);
  if (report_first) {
    clocks.report(1, 1, report, "w1", 20);
    EXPECT_EQ(clocks.release().size(), 1u) << "no hold yet: worker 1 goes on to step 1";
    clocks.hold(0, "chief", 30);
    EXPECT_FALSE(clocks.takeHoldAnswer()) << "answered while worker 1 is inside step 1";
    EXPECT_FALSE(store.push(1, 0, 1, gradient({0, 4, 0}), 0)) << "step 1's push queues behind step 0's";
    clocks.report(1, 2, report, "w1", 21);
  } else {
    clocks.hold(0, "chief", 30);
    EXPECT_FALSE(clocks.takeHoldAnswer()) << "answered while worker 1 is inside step 0";
    clocks.report(1, 1, report, "w1", 20);
  }
  EXPECT_TRUE(clocks.release().empty()) << "a report answered under the hold";
  const auto hold = clocks.takeHoldAnswer();
  ASSERT_TRUE(hold);
  const std::vector<uint32_t> expected_point = {0, report_first ? 2u : 1u};
  EXPECT_EQ(hold->point.clocks, expected_point);
  EXPECT_TRUE(store.pull(0, pullFrom(0, 40, Clock::now(), hold->point.clocks), 0).empty())
      << "the snapshot was answered with worker 1's step 0 unapplied";
  auto after0 = runApply(store, std::move(push0));
  std::vector<float> expected = {1 - 0.5f * 2, 2, 3};
  if (report_first) {
    EXPECT_TRUE(after0.replies.empty()) << "the snapshot was answered without worker 1's step 1";
    after0 = runApply(store, std::move(after0.next));
    expected[1] -= 0.25f * 4;
  }
  ASSERT_EQ(after0.replies.size(), 1u);
  EXPECT_EQ(after0.replies[0].header.request_id, 40u);
  expectValues(after0.replies[0], expected);  // SGD keeps no slots: the state is the values
  // Ending the hold answers worker 1's held report.
  clocks.unhold(0);
  const auto released = clocks.release();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].request_id, report_first ? 21u : 20u);
}

INSTANTIATE_TEST_SUITE_P(ReportBeforeOrAfterTheHold, SnapshotOrder, ::testing::Bool());

// A restart in place: a sync worker says it leaves (ps-leave). Every pull
// held for the start fails at once naming it, and so does every later one
// that would have to wait; a pull that can be answered still is.
TEST(ChunkStoreSync, AWorkerThatLeavesToStartAgainFailsEveryWaitingPullAtOnce) {
  ChunkStore store = storeFor(configFor(Mode::PsSync, 2));
  store.push(0, 0, 0, gradient({1, 1, 1}), 0);
  const auto t0 = Clock::now();
  EXPECT_TRUE(store.pull(0, pullFrom(0, 1, t0), 1).empty());
  EXPECT_TRUE(store.expire(t0 + 1s).empty()) << "failed before the peer timeout without a departure";
  ASSERT_TRUE(store.depart(1));
  EXPECT_FALSE(store.depart(0)) << "the first departure is the one the errors name";
  const auto failed = store.expire(t0 + 1s);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].routing, "w0");
  EXPECT_EQ(failed[0].header.type, net::MessageType::kError);
  EXPECT_EQ(textOf(failed[0]), "ps 0: pull of chunk 7 cannot be answered: worker 1 left to start again in place "
                               "(--restart-wait; its log says why)");
  const auto answered = store.pull(0, pullFrom(0, 2), 0);
  ASSERT_EQ(answered.size(), 1u) << "step 0's values are there to give";
  EXPECT_EQ(answered[0].header.type, msg::kValues);
  const auto later = store.pull(0, pullFrom(0, 3), 1);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_NE(textOf(later[0]).find("worker 1 left to start again in place"), std::string::npos);
  EXPECT_FALSE(store.holdsPullOf("w0"));
  // Async and SSP jobs take the worker back instead (elastic).
  ChunkStore async = storeFor(configFor(Mode::PsAsync, 2));
  EXPECT_FALSE(async.depart(1));
}

// A sync worker dies mid-step and a replacement takes its place: the step
// completes with the pushes that came, as their mean, and the replacement
// is awaited from the step it joins at, not before.
TEST(ChunkStoreSync, ALeftWorkersStepIsTheMeanOfThePushesInAndItsReplacementPushesFromItsJoinStep) {
  ChunkStore store = storeFor(configFor(Mode::PsSync, 3));
  EXPECT_FALSE(store.push(0, 0, 0, gradient({1, 1, 1}), 0));
  EXPECT_FALSE(store.push(1, 0, 0, gradient({2, 4, 6}), 0));
  EXPECT_TRUE(store.pull(0, pullFrom(0, 1), 1).empty());
  auto jobs = store.leave(2);
  ASSERT_EQ(jobs.size(), 1u) << "the step waits for the dead worker";
  EXPECT_DOUBLE_EQ(jobs[0].scale, 1.5);
  const auto applied = runApply(store, std::move(jobs[0]));
  ASSERT_EQ(applied.replies.size(), 1u);
  // Pushed pre-scaled by 1/3: the two pushes' sum times 3/2 is their mean's share.
  expectValues(applied.replies[0], {1 - 0.5f * 4.5f, 2 - 0.5f * 7.5f, 3 - 0.5f * 10.5f});
  EXPECT_EQ(refusalOf([&] { store.push(2, 0, 1, gradient({0, 0, 0}), 0); }),
            "worker 2 pushed chunk 7 for step 1, but it left the job (it died, and its replacement has not joined)");
  store.joinAt(2, 2);
  EXPECT_EQ(refusalOf([&] { store.push(2, 0, 1, gradient({0, 0, 0}), 0); }),
            "worker 2 pushed chunk 7 for step 1, but it joined to push from step 2 on");
  EXPECT_FALSE(store.push(0, 0, 1, gradient({0, 0, 0}), 0));
  auto step1 = store.push(1, 0, 1, gradient({0, 0, 0}), 0);
  ASSERT_TRUE(step1) << "step 1 waits for the replacement, which joins at step 2";
  runApply(store, std::move(step1));
  EXPECT_FALSE(store.push(0, 0, 2, gradient({1, 1, 1}), 0));
  EXPECT_FALSE(store.push(1, 0, 2, gradient({1, 1, 1}), 0)) << "step 2 applied without the replacement";
  auto step2 = store.push(2, 0, 2, gradient({1, 1, 1}), 0);
  ASSERT_TRUE(step2);
  EXPECT_EQ(step2->grads.size(), 3u);
  EXPECT_DOUBLE_EQ(step2->scale, 1.0) << "every worker in: the plain sum, as before";
  runApply(store, std::move(step2));
  EXPECT_EQ(refusalOf([&] { store.joinAt(1, 2); }), "worker 1 joins to push from step 2, but chunk 7 is at step 3 already");
}

// A dead worker's push that came before it died stays in its step.
TEST(ChunkStoreSync, APushTheLeftWorkerMadeBeforeItDiedCountsInItsStep) {
  ChunkStore store = storeFor(configFor(Mode::PsSync, 3));
  store.push(2, 0, 0, gradient({3, 3, 3}), 0);
  store.push(0, 0, 0, gradient({0, 0, 0}), 0);
  EXPECT_TRUE(store.leave(2).empty()) << "worker 1's push is still awaited";
  auto job = store.push(1, 0, 0, gradient({0, 0, 0}), 0);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->grads.size(), 3u);
  EXPECT_DOUBLE_EQ(job->scale, 1.0);
}

TEST(ChunkStoreSync, AHeldPullFailsAtThePeerTimeoutNamingTheMissingPushes) {
  ChunkStore store = storeFor(configFor(Mode::PsSync, 3));
  store.push(1, 0, 0, gradient({1, 1, 1}), 0);
  const auto t0 = Clock::now();
  store.pull(0, pullFrom(1, 9, t0), 1);
  EXPECT_TRUE(store.expire(t0 + 4999ms).empty());
  const auto failed = store.expire(t0 + 5s);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].header.request_id, 9u);
  const std::string text = textOf(failed[0]);
  EXPECT_NE(text.find("ps 0: pull of chunk 7 waited "), std::string::npos) << text;
  EXPECT_NE(text.find("(--peer-timeout); no push of step 0 from worker 0, worker 2"), std::string::npos) << text;
  EXPECT_TRUE(store.expire(t0 + 10s).empty()) << "a pull failed twice";
}

// A sync pull of the current version is sent without a copy; the chief's
// next start re-initialises the store while that send may still be in
// flight, so the old values must outlive the reset.
TEST(ChunkStore, ValuesSentWithoutACopyOutliveTheNextInit) {
  ChunkStore store = storeFor(configFor(Mode::PsSync, 1));
  auto replies = store.pull(0, pullFrom(0, 1), 0);
  ASSERT_EQ(replies.size(), 1u);
  store.reset(configFor(Mode::PsSync, 1));
  EXPECT_FALSE(store.everyChunkSet()) << "the new start's chunk must be set again";
  expectValues(replies[0], kInitial);
}

TEST(ChunkStoreAsync, StoppedApplyingStartsNoQueuedPush) {
  ChunkStore store = storeFor(configFor(Mode::Ssp, 2));
  auto first = store.push(0, 0, 0, gradient({1, 1, 1}), 0);
  store.push(1, 0, 0, gradient({1, 1, 1}), 0);
  store.stopApplying(true);
  EXPECT_FALSE(runApply(store, std::move(first)).next) << "a queued push started while stopping";
  EXPECT_FALSE(store.busy());
  store.stopApplying(false);
  EXPECT_TRUE(store.push(0, 0, 1, gradient({1, 1, 1}), 0)) << "the queue did not resume";
}

}  // namespace
}  // namespace tandem::ps
