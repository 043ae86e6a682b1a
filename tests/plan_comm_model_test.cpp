// The planner's comm-bound optimum against cases computed by hand.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "plan/comm_model.hpp"

namespace tandem::plan {
namespace {

constexpr double kModel = 100e6;     // bytes
constexpr double kTenGbit = 1.25e9;  // bytes/s

Workload work() { return {0.05, 0.10, kModel, 32}; }

TEST(CommModel, RingAllReduceCarriesTwiceNMinusOneOverNOfTheModelOnEachHostLink) {
  // 4 hosts x 1 worker: 2*3/4*100 MB = 150 MB per link and direction, 0.12 s
  // at 10 Gbit/s; plus 2*(4-1) latencies of 100 us.
  const Prediction p = predict(work(), {4, 1, kTenGbit, 100e-6}, {Algorithm::kRingAllReduce});
  EXPECT_DOUBLE_EQ(p.load.worker_host_bytes, 150e6);
  EXPECT_NEAR(p.comm_s, 0.12 + 6 * 100e-6, 1e-12);
  EXPECT_NEAR(p.step_s, 0.05 + 0.1206, 1e-12);
  EXPECT_NEAR(p.efficiency, 0.15 / 0.1706, 1e-12);
  EXPECT_NEAR(p.samples_per_s, 4 * 32 / 0.1706, 1e-9);
  EXPECT_EQ(p.bottleneck, "worker links");
  // Two workers a host: the ring still crosses each host's link once.
  EXPECT_DOUBLE_EQ(linkLoad(work(), {2, 2, kTenGbit, 0}, {Algorithm::kRingAllReduce}).worker_host_bytes, 150e6);
  // One host: no link at all.
  const Prediction alone = predict(work(), {1, 4, kTenGbit, 100e-6}, {Algorithm::kRingAllReduce});
  EXPECT_EQ(alone.comm_s, 0);
  EXPECT_DOUBLE_EQ(alone.efficiency, 1.0);
  EXPECT_EQ(alone.bottleneck, "compute");
}

TEST(CommModel, DedicatedServersCarryEveryWorkersShareOfThem) {
  // 4 hosts x 2 workers, 2 servers: a worker host pushes and pulls 2 x 100 MB;
  // a server host serves 8 workers x 50 MB = 400 MB, the bottleneck.
  const Prediction p = predict(work(), {4, 2, kTenGbit, 100e-6}, {Algorithm::kPsDedicated, 2});
  EXPECT_DOUBLE_EQ(p.load.worker_host_bytes, 200e6);
  EXPECT_DOUBLE_EQ(p.load.server_host_bytes, 400e6);
  EXPECT_NEAR(p.comm_s, 0.32 + 2 * 100e-6, 1e-12);
  EXPECT_EQ(p.bottleneck, "server links");
}

TEST(CommModel, ColocatedServersSplitEachHostsLinkBetweenServingAndPushing) {
  // One server on each of 4 hosts, 2 workers each: serving 6 remote workers
  // 25 MB and pushing 2 x 75 MB to the other servers = 300 MB.
  EXPECT_DOUBLE_EQ(linkLoad(work(), {4, 2, kTenGbit, 0}, {Algorithm::kPsColocated, 4}).worker_host_bytes, 300e6);
  // Servers on 2 of 4 hosts: a server host serves 6 x 50 MB and pushes
  // 2 x 50 MB = 400 MB; a host without one pushes 200 MB.
  EXPECT_DOUBLE_EQ(linkLoad(work(), {4, 2, kTenGbit, 0}, {Algorithm::kPsColocated, 2}).worker_host_bytes, 400e6);
  EXPECT_THROW(linkLoad(work(), {4, 2, kTenGbit, 0}, {Algorithm::kPsColocated, 5}), InputError);
}

TEST(CommModel, AFastEnoughLinkLeavesTheStepBoundByCompute) {
  const Prediction p = predict(work(), {8, 4, 1e15, 0}, {Algorithm::kRingAllReduce});
  EXPECT_NEAR(p.step_s, 0.15, 1e-9);
  EXPECT_NEAR(p.efficiency, 1.0, 1e-9);
  EXPECT_EQ(p.bottleneck, "compute");
  // Communication hidden behind backward costs nothing either.
  const Prediction hidden = predict(work(), {2, 1, 1e9, 0}, {Algorithm::kRingAllReduce});  // 100 MB: 0.1 s
  EXPECT_NEAR(hidden.step_s, 0.15, 1e-12);
  EXPECT_EQ(hidden.bottleneck, "compute");
}

// DiLoCo: the exchange alone (no compute), once per h steps of compute.
TEST(CommModel, LocalStepsSpreadOneUnoverlappedExchangeOverTheirSteps) {
  const Cluster cluster{4, 1, kTenGbit, 0};
  Workload bare = work();
  bare.forward_s = bare.backward_s = 0;
  const Prediction exchange = predict(bare, cluster, {Algorithm::kRingAllReduce});
  EXPECT_NEAR(exchange.step_s, 0.12, 1e-12);  // 150 MB at 10 Gbit/s, nothing to hide behind
  const Prediction p = withLocalSteps(exchange, work(), cluster, 10);
  EXPECT_NEAR(p.step_s, 0.15 + 0.012, 1e-12);
  EXPECT_NEAR(p.comm_s, 0.012, 1e-12);
  EXPECT_DOUBLE_EQ(p.load.worker_host_bytes, 15e6);
  EXPECT_NEAR(p.efficiency, 0.15 / 0.162, 1e-12);
  EXPECT_NEAR(p.samples_per_s, 4 * 32 / 0.162, 1e-9);
  EXPECT_NEAR(p.overlapped_step_s, 0.15, 1e-12);  // an exchange hidden behind the next round
  EXPECT_EQ(p.bottleneck, "compute");
  // One local step: the exchange follows the step's compute, unhidden.
  EXPECT_NEAR(withLocalSteps(exchange, work(), cluster, 1).step_s, 0.27, 1e-12);
  // The bound is the larger part: on a 1 Gbit/s link the exchange (1.2 s)
  // outweighs a step's compute until 10 steps share it.
  const Cluster slow{4, 1, kTenGbit / 10, 0};
  const Prediction slow_exchange = predict(bare, slow, {Algorithm::kRingAllReduce});
  EXPECT_EQ(withLocalSteps(slow_exchange, work(), slow, 1).bottleneck, "worker links");
  EXPECT_EQ(withLocalSteps(slow_exchange, work(), slow, 10).bottleneck, "compute");
  EXPECT_THROW(withLocalSteps(exchange, work(), cluster, 0), InputError);
}

// Streaming DiLoCo: each fragment's share of the exchange hides behind the
// steps it overlaps; only what sticks out counts.
TEST(CommModel, StreamingHidesEachFragmentBehindItsOverlappedSteps) {
  const Cluster slow{4, 1, kTenGbit / 10, 0};
  Workload bare = work();
  bare.forward_s = bare.backward_s = 0;
  const Prediction exchange = predict(bare, slow, {Algorithm::kRingAllReduce});
  EXPECT_NEAR(exchange.step_s, 1.2, 1e-12);
  // 5 fragments of 0.24 s, each behind one 0.15 s step: 0.09 s out, 5 times per 10 steps.
  EXPECT_NEAR(withLocalSteps(exchange, work(), slow, 10, 5, 1).step_s, 0.15 + 0.045, 1e-12);
  EXPECT_NEAR(withLocalSteps(exchange, work(), slow, 10, 5, 2).step_s, 0.15, 1e-12);  // hidden
  EXPECT_NEAR(withLocalSteps(exchange, work(), slow, 10, 5, 0).step_s, 0.15 + 0.12, 1e-12);  // as plain DiLoCo
  EXPECT_DOUBLE_EQ(withLocalSteps(exchange, work(), slow, 10, 5, 1).load.worker_host_bytes, 15e6);
  EXPECT_THROW(withLocalSteps(exchange, work(), slow, 10, 11, 0), InputError);
  EXPECT_THROW(withLocalSteps(exchange, work(), slow, 10, 2, -1), InputError);
}

TEST(CommModel, BadInputIsRefused) {
  EXPECT_THROW(predict(work(), {0, 1, kTenGbit, 0}, {}), InputError);
  EXPECT_THROW(predict(work(), {2, 1, 0, 0}, {}), InputError);
  EXPECT_THROW(parseAlgorithm("butterfly"), InputError);
  EXPECT_EQ(algorithmName(parseAlgorithm("ps-dedicated")), "ps-dedicated");
}

TEST(CommModel, TandemsPathSendsTheLastBucketAfterBackward) {
  // 2 hosts x 1 worker, ring: each link carries the 100 MB model, 0.08 s at
  // 10 Gbit/s. One 100 MB bucket leaves when backward (0.10 s) ends:
  // 0.05 + 0.10 + 0.08. Four 25 MB buckets leave at 0.025, 0.05, 0.075 and
  // 0.10 s and take 0.02 s each: the link is free in time for each, so the
  // exchange ends at 0.12 s, one bucket after backward.
  const Cluster two{2, 1, kTenGbit, 0};
  const Layout ring{Algorithm::kRingAllReduce};
  EXPECT_NEAR(predictTandem(work(), two, ring, {100e6}).step_s, 0.05 + 0.10 + 0.08, 1e-12);
  EXPECT_NEAR(predictTandem(work(), two, ring, {25e6}).step_s, 0.05 + 0.12, 1e-12);
  // Tiny buckets approach the optimum, compute-bound here: 0.05 + max(0.10, 0.08).
  EXPECT_NEAR(predictTandem(work(), two, ring, {0.1e6}).step_s, predict(work(), two, ring).step_s, 1e-4);
  // Latency: 2(n-1) = 2 per bucket, 4 buckets of 0.02 s that now each end 200 us later.
  const Cluster slow{2, 1, kTenGbit, 100e-6};
  EXPECT_NEAR(predictTandem(work(), slow, ring, {25e6}).step_s, 0.05 + 0.12 + 2 * 100e-6, 1e-12);
}

TEST(CommModel, TandemsPathPullsEachChunkAfterItsApply) {
  // 1 dedicated server, 1 worker on 1 host: the worker's link pushes and
  // pulls 100 MB (0.08 s each way). Two 50 MB chunks: pushes end at 0.09
  // and 0.14 s (ready at 0.05 and 0.10); a 1 GB/s apply takes 0.05 s, so
  // pulls run 0.14-0.18 and 0.19-0.23 s.
  const Prediction p = predictTandem(work(), {1, 1, kTenGbit, 0}, {Algorithm::kPsDedicated, 1}, {50e6, 1e9, 0});
  EXPECT_NEAR(p.step_s, 0.05 + 0.23, 1e-12);
  // The link could carry it all within backward (the optimum is compute-bound).
  EXPECT_EQ(predict(work(), {1, 1, kTenGbit, 0}, {Algorithm::kPsDedicated, 1}).bottleneck, "compute");
  EXPECT_EQ(p.bottleneck, "exchange after backward");
  // A fixed 1 ms per message: the last chunk's push waits for backward, not for the
  // link, so only two messages (its push and pull) lie on the critical path.
  const Prediction q = predictTandem(work(), {1, 1, kTenGbit, 0}, {Algorithm::kPsDedicated, 1}, {50e6, 1e9, 1e-3});
  EXPECT_NEAR(q.step_s, 0.05 + 0.23 + 0.002, 1e-12);
}

// A server on every host: one direction of each link carries this host's
// pushes and the other's pulls, 50 MB each a step (100 MB, 0.08 s at 10
// Gbit/s). They queue together: push 1 (ready at 0.05) 0.05-0.07, its pull
// 0.07-0.09, push 2 (ready at 0.10) 0.10-0.12, its pull 0.12-0.14.
TEST(CommModel, TandemsPathQueuesPushesAndPullsOnOneDirectionWhenEveryHostHoldsAServer) {
  const Prediction p = predictTandem(work(), {2, 1, kTenGbit, 0}, {Algorithm::kPsColocated, 2}, {50e6, 0, 0});
  EXPECT_DOUBLE_EQ(p.load.worker_host_bytes, 100e6);
  EXPECT_NEAR(p.step_s, 0.05 + 0.14, 1e-12);
  // Hierarchical, two workers a host: the same bytes per host and step.
  const Prediction hier =
      predictTandem(work(), {2, 2, kTenGbit, 0}, {Algorithm::kHierPsColocated, 2}, {50e6, 0, 0});
  EXPECT_NEAR(hier.step_s, 0.05 + 0.14, 1e-12);
  // One server for two hosts: pushes and pulls use opposite directions.
  const Prediction one = predictTandem(work(), {2, 1, kTenGbit, 0}, {Algorithm::kPsColocated, 1}, {50e6, 0, 0});
  EXPECT_DOUBLE_EQ(one.load.worker_host_bytes, 100e6);
  EXPECT_NEAR(one.step_s, 0.05 + 0.10 + 0.08, 1e-12);
}

// Priority scheduling, sync PS: the next forward starts once the first
// chunk is back, and the exchange runs on under it.
TEST(CommModel, PriorityOverlapsTheNextForwardWithTheExchange) {
  // 1 dedicated server, 1 worker: 100 MB each way is 0.08 s of link. Compute
  // (0.15 s) binds: after backward the first 10 MB chunk goes and comes back
  // (2 x 0.008 s), so the step is 0.15 + 0.016 s.
  const Cluster one{1, 1, kTenGbit, 0};
  const Layout dedicated{Algorithm::kPsDedicated, 1};
  const Prediction p = predictTandem(work(), one, dedicated, {10e6, 0, 0, false, true});
  EXPECT_NEAR(p.step_s, 0.15 + 0.016, 1e-12);
  EXPECT_EQ(p.bottleneck, "compute");
  // A 1 Gbit/s link binds: 0.8 s a direction plus 10 messages of 1 ms.
  const Cluster slow{1, 1, kTenGbit / 10, 0};
  const Prediction q = predictTandem(work(), slow, dedicated, {10e6, 0, 1e-3, false, true});
  EXPECT_NEAR(q.step_s, 0.8 + 10 * 1e-3, 1e-12);
  EXPECT_EQ(q.bottleneck, "worker links");  // as busy as the server's
  // The optimum with the forward overlapped: max(compute, link); without
  // priority the forward still waits for the whole exchange.
  EXPECT_NEAR(predict(work(), slow, dedicated).overlapped_step_s, 0.8, 1e-12);
  EXPECT_NEAR(predict(work(), one, dedicated).overlapped_step_s, 0.15, 1e-12);
  EXPECT_GT(predictTandem(work(), slow, dedicated, {10e6, 0, 1e-3, false, false}).step_s, 0.85);
}

TEST(CommModel, AsyncWorkersShareTheServerLinkAsAQueue) {
  // 2 hosts x 1 worker, 1 server on host 0, 10 MB model in one chunk, 1 s
  // of backward, 100 MB/s links. Worker 0 reaches the server through
  // loopback: a plain 0.05 + 1.0 s step. Worker 1 pushes and pulls 10 MB
  // over the server's link after backward: 0.1 s each way on an idle link,
  // but its own pushes and pulls keep the link busy a fraction u of the
  // time, so each takes 0.1 / (1 - u); u = 10 MB / (100 MB/s x its step).
  // Step = 1.05 + 0.2 / (1 - u): u = 0.1 / step gives step = 1.25 + ~0.0233.
  const Workload w{0.05, 1.0, 10e6, 8};
  const Prediction p = predictTandem(w, {2, 1, 100e6, 0}, {Algorithm::kPsColocated, 1}, {10e6, 0, 0, true});
  EXPECT_NEAR(p.step_s, 1.05, 1e-9);  // worker 0
  // Solve step = 1.05 + 0.2 / (1 - 0.1 / step) by iteration, for worker 1.
  double far = 1.25;
  for (int i = 0; i < 100; ++i) far = 1.05 + 0.2 / (1 - 0.1 / far);
  EXPECT_NEAR(p.samples_per_s, 8 / 1.05 + 8 / far, 1e-6);
  EXPECT_EQ(p.bottleneck, "exchange after backward");
  // Synchronous workers would wait for worker 1: both at its idle-link step.
  const Prediction sync = predictTandem(w, {2, 1, 100e6, 0}, {Algorithm::kPsColocated, 1}, {10e6, 0, 0, false});
  EXPECT_NEAR(sync.step_s, 1.25, 1e-9);
}

// The optimum of any all-reduce is the hierarchical ring's bytes; Tandem's
// path counts what Gloo runs flat: a ring by default (c10d's Gloo), and,
// given a ring threshold, halving-doubling below it, which over
// power-of-two workers placed host by host keeps its first rounds on each
// host.
TEST(CommModel, FlatAllReduceCountsTheAlgorithmGlooRunsForTheBucket) {
  const Cluster c{2, 2, kTenGbit, 100e-6};
  const Layout flat{Algorithm::kRingAllReduce};
  // 2 hosts: 2*1/2 = 100 MB per link at the optimum, against a 4-worker ring's 150 MB.
  EXPECT_DOUBLE_EQ(predict(work(), c, flat).load.worker_host_bytes, 100e6);
  EXPECT_DOUBLE_EQ(linkLoad(work(), c, flat).worker_host_bytes, 150e6);
  EXPECT_DOUBLE_EQ(predictTandem(work(), c, flat, {1e6}).load.worker_host_bytes, 150e6);  // a ring by default
  TandemPath hd{1e6};
  hd.ring_threshold_bytes = 4 * 1024 * 1024;
  const Prediction small = predictTandem(work(), c, flat, hd);  // halving-doubling: 2*log2(4) latencies a bucket
  EXPECT_DOUBLE_EQ(small.load.worker_host_bytes, 100e6);
  TandemPath ring{25e6};
  ring.ring_threshold_bytes = 4 * 1024 * 1024;
  const Prediction large = predictTandem(work(), c, flat, ring);  // ring-chunked
  EXPECT_DOUBLE_EQ(large.load.worker_host_bytes, 150e6);
  EXPECT_GT(large.step_s, small.step_s);
  // The threshold is the communicator's, and can move.
  TandemPath raised{25e6};
  raised.ring_threshold_bytes = 30e6;
  EXPECT_DOUBLE_EQ(predictTandem(work(), c, flat, raised).load.worker_host_bytes, 100e6);
  // 3 workers a host: halving-doubling's blocks cross hosts; counted as a ring.
  EXPECT_DOUBLE_EQ(predictTandem(work(), {2, 3, kTenGbit, 0}, flat, hd).load.worker_host_bytes,
                   2.0 * 5 / 6 * 100e6);
  // Latency: one 100 MB model in 1 MB buckets pays 4 latencies a bucket, not the ring's 6.
  const Cluster slow{2, 2, 1e15, 1e-3};
  const Workload tiny_backward{0.05, 1e-6, kModel, 32};
  EXPECT_NEAR(predictTandem(tiny_backward, slow, flat, hd).step_s, 0.05 + 100 * 4e-3, 1e-6);
}

TEST(CommModel, HierarchicalLayoutsCrossEachHostLinkOncePerHost) {
  // 4 hosts x 4 workers, 100 MB. A flat ring crosses each host link with
  // 2*15/16 of the model (187.5 MB); reducing inside each host first leaves
  // a ring of 4 hosts: 2*3/4 = 150 MB, and 2*3 latencies instead of 2*15.
  const Cluster c{4, 4, kTenGbit, 100e-6};
  EXPECT_DOUBLE_EQ(linkLoad(work(), c, {Algorithm::kRingAllReduce}).worker_host_bytes, 187.5e6);
  const Prediction hier = predict(work(), c, {Algorithm::kHierAllReduce});
  EXPECT_DOUBLE_EQ(hier.load.worker_host_bytes, 150e6);
  EXPECT_NEAR(hier.comm_s, 0.12 + 6 * 100e-6, 1e-12);
  // Dedicated servers (2): a worker host pushes and pulls the model once,
  // not 4 times (100 against 400 MB); a server serves 4 hosts' halves, not
  // 16 workers' (200 against 800 MB).
  const LinkLoad flat = linkLoad(work(), c, {Algorithm::kPsDedicated, 2});
  const LinkLoad byhost = linkLoad(work(), c, {Algorithm::kHierPsDedicated, 2});
  EXPECT_DOUBLE_EQ(flat.worker_host_bytes, 400e6);
  EXPECT_DOUBLE_EQ(byhost.worker_host_bytes, 100e6);
  EXPECT_DOUBLE_EQ(flat.server_host_bytes, 800e6);
  EXPECT_DOUBLE_EQ(byhost.server_host_bytes, 200e6);
  EXPECT_EQ(parseAlgorithm("hier-ps-colocated"), Algorithm::kHierPsColocated);
  EXPECT_EQ(algorithmName(Algorithm::kHierAllReduce), "hier-allreduce");
}

}  // namespace
}  // namespace tandem::plan
