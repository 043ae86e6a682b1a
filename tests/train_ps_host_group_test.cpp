// Hierarchical PS aggregation among one host's workers, in-process over
// loopback Gloo: each chunk's owner gets the host's sum in rank order and
// pushes it; a share hands every owner's values to the others.
#include "train/ps_host_group.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "cluster/coordinator.hpp"
#include "support/test_security.hpp"

namespace tandem::train {
namespace {

using namespace std::chrono_literals;

// Chunks of 3, 2, 4 and 1 floats: groups {0, 1} and {2, 3}; rank 0 owns
// chunks 0 and 2, rank 1 chunks 1 and 3 (ps::pusherRank).
const std::vector<PsHostGroup::Range> kChunks = {{0, 3}, {3, 2}, {5, 4}, {9, 1}};
constexpr int kFloats = 10;

TEST(PsHostGroup, OwnersPushTheHostsSumAndShareTheirValuesWithTheOthers) {
  cluster::CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  const std::vector<int> members = {4, 7};  // global worker indices
  std::vector<std::vector<float>> flats(2, std::vector<float>(kFloats));
  std::vector<std::vector<size_t>> pushed(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        cluster::CoordinatorClient store({"127.0.0.1", server.port()}, 10s, tandem::testing::testSecurity());
        PsHostGroup group(store, members, members[static_cast<size_t>(r)], 10.0, kChunks);
        EXPECT_EQ(group.rank(), r);
        std::vector<float>& flat = flats[static_cast<size_t>(r)];
        for (int i = 0; i < kFloats; ++i) flat[static_cast<size_t>(i)] = static_cast<float>((r + 1) * (i + 1));
        std::mutex mutex;
        // Rank 1 hands its chunks over in the other order within each group:
        // a group is summed once all of its chunks are in, whatever the order.
        const std::vector<size_t> order = r == 0 ? std::vector<size_t>{0, 1, 2, 3} : std::vector<size_t>{1, 0, 3, 2};
        for (size_t c : order) {
          group.reduce(flat.data(), c, [&](size_t own) {
            std::lock_guard lock(mutex);
            pushed[static_cast<size_t>(r)].push_back(own);
          });
        }
        group.awaitReduces(Deadline::after(10s));
        // Each owner's pulled values, then shared with the host.
        for (const size_t own : pushed[static_cast<size_t>(r)]) {
          for (int64_t i = kChunks[own].begin; i < kChunks[own].begin + kChunks[own].length; ++i) {
            EXPECT_EQ(flat[static_cast<size_t>(i)], static_cast<float>(3 * (i + 1))) << "rank " << r << " float " << i;
            flat[static_cast<size_t>(i)] = static_cast<float>(1000 + i);
          }
        }
        EXPECT_EQ(group.shareEnd(3), 4u) << "a share ends on a group boundary";
        group.share(flat.data(), 0, group.shareEnd(4), Deadline::after(10s));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    std::sort(pushed[static_cast<size_t>(r)].begin(), pushed[static_cast<size_t>(r)].end());
    EXPECT_EQ(pushed[static_cast<size_t>(r)], (r == 0 ? std::vector<size_t>{0, 2} : std::vector<size_t>{1, 3}));
    for (int i = 0; i < kFloats; ++i) {
      EXPECT_EQ(flats[static_cast<size_t>(r)][static_cast<size_t>(i)], static_cast<float>(1000 + i))
          << "rank " << r << " float " << i << " after the share";
    }
  }
}

TEST(PsHostGroup, AWorkerOutsideItsGroupIsABug) {
  cluster::CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  cluster::CoordinatorClient store({"127.0.0.1", server.port()}, 1s, tandem::testing::testSecurity());
  EXPECT_THROW(PsHostGroup(store, {0, 1}, 2, 1.0, kChunks), Error);
}

}  // namespace
}  // namespace tandem::train
