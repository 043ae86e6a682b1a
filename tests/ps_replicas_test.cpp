// --ps-replicas 2 in one process: a worker against two real servers that
// both hold every chunk, one of them dying (and coming back) between or
// within steps. No torch, no trainer.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/worker.hpp"
#include "support/freezable_proxy.hpp"
#include "support/ps_server_harness.hpp"
#include "support/test_security.hpp"

// Its own namespace: the unity build compiles it beside ps_worker_test.
namespace tandem::ps::testing::replicas {
namespace {

using namespace std::chrono_literals;

// --ps-replicas 2 over two servers: every chunk on both. One sync worker
// trains two steps with a gradient of 1, and a server dies at `when`;
// returns the values pulled after the second step.
enum class Death { kNone, kBetweenSteps, kAfterThePushes, kBackupAfterThePushes };

// Two servers holding every chunk of `layout`, set up by sync worker 0 of
// a job of `workers` with `optimizer`, which has said hello.
struct ReplicatedJob {
  std::vector<std::unique_ptr<RunningServer>> servers;
  std::unique_ptr<Worker> worker;
};

ReplicatedJob startReplicated(const KeyLayout& layout, int workers, Deadline deadline,
                              const optim::OptimizerSettings& optimizer = {}, Mode mode = Mode::PsSync) {
  ReplicatedJob job;
  std::vector<ServerAddress> addresses;
  for (int i = 0; i < 2; ++i) {
    job.servers.push_back(std::make_unique<RunningServer>(ServerOptions{.bind_host = "127.0.0.1", .index = i}));
    addresses.push_back({job.servers.back()->endpoint(), "ps " + std::to_string(i)});
  }
  job.worker = std::make_unique<Worker>(WorkerOptions{addresses, layout, mode, 0, WireDtype::kFloat32},
                                        tandem::testing::testSecurity());
  std::vector<ServerConfig> configs = configsFor(layout, mode, WireDtype::kFloat32, workers, 10);
  for (size_t i = 0; i < configs.size(); ++i) {
    configs[i].optimizer = optimizer;
    if (mode != Mode::PsSync) {  // each forwards what it applies to the other, its chunks' backup
      configs[i].forward_to = addresses[1 - i].endpoint;
      configs[i].forward_name = addresses[1 - i].name;
    }
  }
  job.worker->initServers(configs, [&](size_t c, int64_t&) { return initial(layout, c); }, deadline);
  job.worker->hello(deadline);
  return job;
}

// One step of worker `w` alone with a gradient of 1 everywhere;
// `between` runs after its pushes. Returns the values pulled after it.
std::vector<std::vector<float>> trainStep(Worker& w, int64_t step, Deadline deadline,
                                          const std::function<void()>& between = {}) {
  const KeyLayout& layout = w.layout();
  std::vector<std::vector<float>> grads, pulled(layout.chunks.size());
  for (const auto& chunk : layout.chunks) grads.emplace_back(static_cast<size_t>(chunk.length), 1.0f);
  for (size_t c = 0; c < grads.size(); ++c) w.push(c, grads[c].data(), step);
  if (between) between();
  const StepAgreement agreed = w.reportStep(step + 1, {1.0, 0.1, false}, deadline);
  EXPECT_EQ(agreed.slowest_clock, static_cast<uint32_t>(step + 1));
  w.awaitPushes(deadline, step);
  w.receivePulls(deadline, step, [&](size_t c, const PulledValues& v) {
    const auto* floats = static_cast<const float*>(v.data);
    pulled[c].assign(floats, floats + v.count);
  });
  return pulled;
}

std::vector<std::vector<float>> trainTwoStepsLosingAServer(Death when, Mode mode = Mode::PsSync) {
  const KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16, 2);
  const Deadline deadline = Deadline::afterSeconds(10);
  const optim::OptimizerSettings momentum{.name = "sgd", .momentum = 0.9};
  ReplicatedJob job = startReplicated(layout, 1, deadline, momentum, mode);
  auto& servers = job.servers;
  Worker& w = *job.worker;
  std::vector<std::vector<float>> pulled;
  for (int64_t step = 0; step < 2; ++step) {
    if (step == 1 && when == Death::kBetweenSteps) servers[0].reset();
    pulled = trainStep(w, step, deadline, [&] {
      if (step == 1 && when == Death::kAfterThePushes) servers[0].reset();
      if (step == 1 && when == Death::kBackupAfterThePushes) servers[1].reset();
    });
  }
  w.sayDone(deadline);
  const std::vector<int> lost = when == Death::kNone                 ? std::vector<int>{}
                                : when == Death::kBackupAfterThePushes ? std::vector<int>{1}
                                                                       : std::vector<int>{0};
  EXPECT_EQ(w.lostServers(), lost);
  return pulled;
}

// Whether ps 0 (which keeps the clocks too) or ps 1 dies, between steps or
// with a step's pushes in flight, the worker ends where nothing died.
TEST(PsReplicas, ALostServersChunksGoOnAtTheirOtherReplicaWithNoUpdateLost) {
  const KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16, 2);
  const auto expected = trainTwoStepsLosingAServer(Death::kNone);
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    ASSERT_EQ(expected[c].size(), static_cast<size_t>(layout.chunks[c].length));
    EXPECT_NE(expected[c], initial(layout, c)) << "two updates were made";
  }
  for (Death when : {Death::kBetweenSteps, Death::kAfterThePushes, Death::kBackupAfterThePushes}) {
    EXPECT_EQ(trainTwoStepsLosingAServer(when), expected) << "death " << static_cast<int>(when);
  }
}

// Async: each server forwards the pushes it applies to the other, the
// backup of its chunks. Whichever dies, between steps or with a step's
// pushes in flight (sent again to the backup, which takes a forwarded one
// once), the worker ends where nothing died.
TEST(PsReplicas, AsyncAServerDeathLosesNoUpdateAndAppliesNoneTwice) {
  const auto expected = trainTwoStepsLosingAServer(Death::kNone, Mode::PsAsync);
  EXPECT_EQ(expected, trainTwoStepsLosingAServer(Death::kNone, Mode::PsSync)) << "one async worker is a sync job";
  for (Death when : {Death::kBetweenSteps, Death::kAfterThePushes, Death::kBackupAfterThePushes}) {
    EXPECT_EQ(trainTwoStepsLosingAServer(when, Mode::PsAsync), expected) << "death " << static_cast<int>(when);
  }
}

// A lost server's replacement at its address: the chief finds it fresh,
// takes it back after step 2 with the other replica's values, momentum
// and clocks, and the next steps reach both servers again; so the other
// server's death after that loses nothing, and the values end where
// nothing died.
TEST(PsReplicas, AReplacementTakenBackHoldsTheChunksSoTheOtherServerMayDieNext) {
  const KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16, 2);
  const Deadline deadline = Deadline::afterSeconds(20);
  const optim::OptimizerSettings momentum{.name = "sgd", .momentum = 0.9};
  std::vector<std::vector<float>> expected;
  {
    ReplicatedJob clean = startReplicated(layout, 1, deadline, momentum);
    for (int64_t step = 0; step < 4; ++step) expected = trainStep(*clean.worker, step, deadline);
  }
  ReplicatedJob job = startReplicated(layout, 1, deadline, momentum);
  Worker& w = *job.worker;
  trainStep(w, 0, deadline);
  const int port = job.servers[0]->port();
  job.servers[0].reset();
  trainStep(w, 1, deadline);
  EXPECT_FALSE(w.replacementWaiting()) << "nothing listens at ps 0's address yet";
  job.servers[0] = std::make_unique<RunningServer>(ServerOptions{.bind_host = "127.0.0.1", .port = port, .index = 0});
  std::optional<int> waiting;
  while (!(waiting = w.replacementWaiting()) && !deadline.expired()) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(waiting, 0);
  w.takeBackServer(0, 2, deadline);
  EXPECT_FALSE(w.replacementWaiting()) << "taken back: nothing is waiting any more";
  EXPECT_EQ(w.rejoinedServers(), std::vector<int>{0});
  trainStep(w, 2, deadline);
  job.servers[1].reset();
  EXPECT_EQ(trainStep(w, 3, deadline), expected);
  EXPECT_EQ(w.lostServers(), (std::vector<int>{0, 1}));
  w.sayDone(deadline);
  EXPECT_EQ(job.servers[0]->summary()["global_step"], 4) << "the replacement made the last steps";
}

// Async: the lost server's replacement at its address is brought up by the
// live holder, which copies it each chunk between two applies and forwards
// it the pushes after. The worker goes on with that holder, turns to the
// replacement once the holder dies too, and ends where nothing died.
TEST(PsReplicas, AsyncReplacementIsBroughtUpByTheLiveHolderSoTheOtherMayDieNext) {
  const KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16, 2);
  const Deadline deadline = Deadline::afterSeconds(20);
  const optim::OptimizerSettings momentum{.name = "sgd", .momentum = 0.9};
  std::vector<std::vector<float>> expected;
  {
    ReplicatedJob clean = startReplicated(layout, 1, deadline, momentum, Mode::PsAsync);
    for (int64_t step = 0; step < 4; ++step) expected = trainStep(*clean.worker, step, deadline);
  }
  ReplicatedJob job = startReplicated(layout, 1, deadline, momentum, Mode::PsAsync);
  Worker& w = *job.worker;
  trainStep(w, 0, deadline);
  const int port = job.servers[0]->port();
  job.servers[0].reset();
  trainStep(w, 1, deadline);
  EXPECT_FALSE(w.bringUpReplacement(deadline)) << "nothing listens at ps 0's address yet";
  job.servers[0] = std::make_unique<RunningServer>(ServerOptions{.bind_host = "127.0.0.1", .port = port, .index = 0});
  while (!w.bringUpReplacement(deadline) && !deadline.expired()) std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(w.bringUpReplacement(deadline)) << "brought up twice";
  trainStep(w, 2, deadline);
  EXPECT_TRUE(w.rejoinedServers().empty()) << "turned to the replacement while ps 1 lives";
  job.servers[1].reset();
  EXPECT_EQ(trainStep(w, 3, deadline), expected);
  EXPECT_EQ(w.lostServers(), (std::vector<int>{0, 1}));
  EXPECT_EQ(w.rejoinedServers(), std::vector<int>{0});
  w.sayDone(deadline);
  EXPECT_EQ(job.servers[0]->summary()["global_step"], 4) << "the replacement made the last steps";
}

// A worker started into the running job while a lost server's replacement
// waits for the chief sets that replacement aside and goes on with the
// live holder: its hello there would wait for the chief, which may be
// waiting for this worker (chaos: a checkpoint's pause held the job 120 s).
TEST(PsReplicas, AJoiningWorkerSetsAsideAReplacementTheChiefHasNotSetUp) {
  const KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16, 2);
  const Deadline deadline = Deadline::afterSeconds(20);
  ReplicatedJob job = startReplicated(layout, 2, deadline, {}, Mode::PsAsync);
  const int port = job.servers[0]->port();
  job.servers[0].reset();
  job.servers[0] = std::make_unique<RunningServer>(ServerOptions{.bind_host = "127.0.0.1", .port = port, .index = 0});
  WorkerOptions options{{{job.servers[0]->endpoint(), "ps 0"}, {job.servers[1]->endpoint(), "ps 1"}},
                        layout, Mode::PsAsync, 1};
  options.joining = true;
  Worker joiner(options, tandem::testing::testSecurity());
  const Stopwatch watch;
  joiner.hello(Deadline::afterSeconds(8));
  EXPECT_LT(watch.elapsed(), 5.0) << "the hello waited for the chief";
  EXPECT_EQ(joiner.lostServers(), std::vector<int>{0});
  std::vector<float> grad(4, 1.0f);
  joiner.push(0, grad.data(), 0);
  joiner.awaitPushes(deadline, 0);  // taken by ps 1, the live holder
  joiner.sayDone(deadline);
}

// Async, a checkpoint's pause: worker 1 pushed its step, the primary of
// one chunk died with that push unseen (its host fell silent, then the
// process died), and worker 1's report is held until the chief's snapshot
// has every reported push. While held, worker 1 sends that push to the
// chunk's backup, so the snapshot ends (CI: it waited 120 s and failed).
TEST(PsReplicas, AsyncAHeldReportSendsAPushPastItsDeadPrimarySoTheCheckpointEnds) {
  const KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16, 2);
  const Deadline deadline = Deadline::afterSeconds(20);
  ReplicatedJob job = startReplicated(layout, 2, deadline, {}, Mode::PsAsync);
  Worker& chief = *job.worker;
  tandem::testing::FreezableProxy to_ps1(job.servers[1]->port());
  WorkerOptions options{{{job.servers[0]->endpoint(), "ps 0"}, {to_ps1.endpoint(), "ps 1"}},
                        layout, Mode::PsAsync, 1};
  options.liveness = {100ms, 500ms};
  Worker other(options, tandem::testing::testSecurity());
  other.hello(deadline);
  ASSERT_TRUE(std::any_of(layout.chunks.begin(), layout.chunks.end(), [](const Chunk& c) { return c.server == 1; }));

  std::atomic<bool> released{false};
  std::vector<FetchedState> states;
  std::string failure;
  std::thread checkpoint([&] {
    try {
      const SnapshotPoint point = chief.holdForSnapshot(deadline);
      states = chief.fetchState(0, 0, deadline, &point);
      released = true;
      chief.releaseSnapshot(deadline);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  std::this_thread::sleep_for(1s);  // the hold is in place at ps 0 before worker 1 reports
  to_ps1.freeze();
  std::vector<float> grad(16, 1.0f);
  for (size_t c = 0; c < layout.chunks.size(); ++c) other.push(c, grad.data(), 0);
  job.servers[1].reset();
  try {
    other.reportStep(1, {1.0, 0.1, false}, deadline);
    EXPECT_TRUE(released) << "worker 1's report was not held by the checkpoint's pause";
    other.awaitPushes(deadline, 0);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  checkpoint.join();
  ASSERT_EQ(failure, "");
  ASSERT_EQ(states.size(), layout.chunks.size());
  for (size_t c = 0; c < states.size(); ++c) EXPECT_EQ(states[c].clock, 1) << "chunk " << c << " lacks the push";
  EXPECT_EQ(other.lostServers(), std::vector<int>{1});
  other.sayDone(deadline);
  chief.sayDone(deadline);
}

TEST(PsReplicas, AChunkWithBothHoldersLostIsNamed) {
  const KeyLayout layout = buildKeyLayout({{"w", 6}, {"b", 4}}, 2, 16, 2);
  const Deadline deadline = Deadline::afterSeconds(10);
  // Two workers: the pull of worker 0's push waits for worker 1's, which never comes.
  ReplicatedJob job = startReplicated(layout, 2, deadline);
  auto& servers = job.servers;
  Worker& w = *job.worker;
  std::vector<float> grad(4, 1.0f);
  w.push(0, grad.data(), 0);
  servers.clear();
  try {
    w.receivePulls(deadline, 0, [](size_t, const PulledValues&) {}, 1);
    ADD_FAILURE() << "a pull with no holder left returned";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 0: its servers ps 0 and ps 1 are lost, and no replica of it is left"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::ps::testing::replicas
