// Prefetcher: ordering, bounded look-ahead, error propagation, shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/prefetcher.hpp"

namespace tandem::data {
namespace {

using namespace std::chrono_literals;

// Encodes each index and the augmentation seed into the batch, so a test can
// see exactly which samples and seed produced it.
class ProbeDataset final : public Dataset {
 public:
  ProbeDataset(int64_t size, std::chrono::milliseconds delay = 0ms, int64_t bad_index = -1)
      : size_(size), delay_(delay), bad_index_(bad_index) {}
  std::string name() const override { return "probe"; }
  int64_t size() const override { return size_; }
  SampleShape shape() const override { return {1, 1, 1}; }
  int64_t numClasses() const override { return 2; }
  Batch getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const override {
    calls_++;
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    std::vector<int64_t> copy(indices.begin(), indices.end());
    for (int64_t i : copy) {
      if (i == bad_index_) throw std::runtime_error("probe failure at index " + std::to_string(i));
    }
    Batch b;
    b.targets = torch::tensor(copy, torch::kLong);
    b.inputs = b.targets.to(torch::kFloat).view({-1, 1, 1, 1}) +
               static_cast<float>(augment_seed % 1000) * 1e4f;
    return b;
  }
  int64_t calls() const { return calls_.load(); }

 private:
  int64_t size_;
  std::chrono::milliseconds delay_;
  int64_t bad_index_;
  mutable std::atomic<int64_t> calls_{0};
};

std::vector<Batch> drain(Prefetcher& p, int64_t n) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(p.next());
  return out;
}

TEST(DataPrefetcher, ThreadedMatchesSynchronousInStepOrder) {
  auto ds = std::make_shared<ProbeDataset>(100);
  ShardSampler sampler(100, 7, 1, 2, 3);  // 7 steps per epoch; cross two epoch boundaries
  const int64_t first = 4, end = 20;
  Prefetcher sync(ds, sampler, first, end, {0, 2, 11});
  Prefetcher threaded(ds, sampler, first, end, {2, 2, 11});
  auto a = drain(sync, end - first);
  auto b = drain(threaded, end - first);
  for (int64_t k = 0; k < end - first; ++k) {
    auto expected = sampler.batchIndices(first + k);
    EXPECT_EQ(std::vector<int64_t>(b[k].targets.data_ptr<int64_t>(),
                                   b[k].targets.data_ptr<int64_t>() + 7),
              expected)
        << "step " << first + k;
    EXPECT_TRUE(torch::equal(a[k].inputs, b[k].inputs)) << "step " << first + k;
  }
  // Each epoch gets its own augmentation seed.
  auto seedOf = [](const Batch& b) { return b.inputs[0].item<float>() - b.targets[0].item<float>(); };
  EXPECT_EQ(seedOf(b[0]), seedOf(b[2]));    // steps 4 and 6, epoch 0
  EXPECT_NE(seedOf(b[2]), seedOf(b[3]));    // steps 6 and 7, epochs 0 and 1
  EXPECT_THROW(threaded.next(), Error);
  EXPECT_THROW(sync.next(), Error);
}

TEST(DataPrefetcher, ManyThreadsStillInOrder) {
  auto ds = std::make_shared<ProbeDataset>(1000, 1ms);
  ShardSampler sampler(1000, 10, 0, 1, 1);
  Prefetcher p(ds, sampler, 0, 200, {4, 3, 0});
  for (int64_t step = 0; step < 200; ++step) {
    auto b = p.next();
    ASSERT_EQ(b.targets[0].item<int64_t>(), sampler.batchIndices(step)[0]) << step;
  }
}

TEST(DataPrefetcher, LookAheadIsBoundedByDepth) {
  auto ds = std::make_shared<ProbeDataset>(1000);
  ShardSampler sampler(1000, 10, 0, 1, 1);
  Prefetcher p(ds, sampler, 0, 100, {3, 2, 0});
  // Wait for the workers to reach the bound (polling, so a slow machine
  // does not flake), then give them time to overshoot it if they would.
  auto settle = [&](int64_t bound) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (ds->calls() < bound && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(ds->calls(), bound);
  };
  settle(2);
  p.next();
  p.next();
  settle(4);
}

TEST(DataPrefetcher, RethrowsBuildErrorAtItsStep) {
  ShardSampler sampler(100, 10, 0, 1, 0, /*shuffle=*/false);
  auto ds = std::make_shared<ProbeDataset>(100, 0ms, /*bad_index=*/35);  // step 3
  for (int threads : {0, 2}) {
    Prefetcher p(ds, sampler, 0, 10, {threads, 4, 0});
    for (int64_t step = 0; step < 3; ++step) {
      EXPECT_EQ(p.next().targets[0].item<int64_t>(), step * 10) << threads;
    }
    try {
      p.next();
      ADD_FAILURE() << "expected the dataset's exception, threads=" << threads;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("index 35"), std::string::npos) << e.what();
    }
  }
}

TEST(DataPrefetcher, DestructorReturnsPromptlyWhenConsumerStopsEarly) {
  auto ds = std::make_shared<ProbeDataset>(100000, 2ms);
  ShardSampler sampler(100000, 10, 0, 1, 0);
  auto start = std::chrono::steady_clock::now();
  {
    Prefetcher p(ds, sampler, 0, 10000, {3, 4, 0});
    p.next();
    std::this_thread::sleep_for(20ms);  // let the queue fill so workers block
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_LE(ds->calls(), 1 + 4);  // step 0 plus `depth` steps ahead
  {
    Prefetcher never_used(ds, sampler, 0, 10000, {2, 2, 0});
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(DataPrefetcher, RejectsBadOptions) {
  auto ds = std::make_shared<ProbeDataset>(10);
  ShardSampler sampler(10, 2, 0, 1, 0);
  EXPECT_THROW(Prefetcher(ds, sampler, 0, 5, {-1, 2, 0}), InputError);
  EXPECT_THROW(Prefetcher(ds, sampler, 0, 5, {1, 0, 0}), InputError);
  EXPECT_THROW(Prefetcher(ds, sampler, 5, 4, {1, 2, 0}), InputError);
  EXPECT_THROW(Prefetcher(nullptr, sampler, 0, 5, {1, 2, 0}), InputError);
  Prefetcher empty(ds, sampler, 3, 3, {1, 2, 0});
  EXPECT_THROW(empty.next(), Error);
}

}  // namespace
}  // namespace tandem::data
