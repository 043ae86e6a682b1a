// The per-host sum both hierarchical modes use (collective/host_mates):
// blocks of any length, sums added in rank order, and a missing host-mate
// named as its worker. Members are threads over loopback Gloo here.
#include "collective/host_mates.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/kv_store.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"

namespace tandem::collective {
namespace {

using namespace std::chrono_literals;

CommunicatorOptions loopback(std::chrono::milliseconds timeout = 10s) {
  CommunicatorOptions options;
  options.timeout = timeout;
  return options;
}

// Runs `body` on every member, one thread each; returns each one's error.
std::vector<std::string> runMates(const std::vector<int>& members, const std::function<void(HostMates&)>& body) {
  cluster::MemoryStore store;
  std::vector<std::string> errors(members.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < members.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        HostMates mates(store, "test", members, members[r], loopback());
        EXPECT_EQ(mates.rank(), static_cast<int>(r));
        body(mates);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Member 0 adds 1e8, member 1 adds 1, member 2 subtracts 1e8: in rank
// order (1e8 + 1) rounds to 1e8 and the sum is exactly 0; any other order
// gives 1. Block 1 is empty, so rank 1 owns nothing and still takes part.
TEST(HostMates, ReduceScatterAddsEachBlockInRankOrder) {
  const std::vector<size_t> lengths = {3, 0, 2};
  const float parts[] = {1e8f, 1.0f, -1e8f};
  expectNoErrors(runMates({5, 8, 9}, [&](HostMates& mates) {
    const auto me = static_cast<size_t>(mates.rank());
    std::vector<float> data(5, parts[me]);
    mates.reduceScatter(data.data(), lengths);
    const std::vector<float> expected = me == 0   ? std::vector<float>{0, 0, 0, parts[0], parts[0]}
                                        : me == 2 ? std::vector<float>{parts[2], parts[2], parts[2], 0, 0}
                                                  : std::vector<float>(5, parts[1]);  // owns no block
    EXPECT_EQ(data, expected) << "rank " << me;
  }));
}

TEST(HostMates, AllgatherHandsEachOwnersBlockToTheOthers) {
  const std::vector<size_t> lengths = {1, 4, 0, 2};
  expectNoErrors(runMates({0, 1, 2, 3}, [&](HostMates& mates) {
    std::vector<float> data(7, -1.0f);
    size_t at = 0;
    for (int r = 0; r < mates.rank(); ++r) at += lengths[static_cast<size_t>(r)];
    for (size_t i = 0; i < lengths[static_cast<size_t>(mates.rank())]; ++i) data[at + i] = float(10 * mates.rank() + i);
    mates.allgather(data.data(), lengths);
    EXPECT_EQ(data, (std::vector<float>{0, 10, 11, 12, 13, 30, 31})) << "rank " << mates.rank();
  }));
}

// Counts that do not divide evenly, and smaller than the host: sum() leaves
// the host's sum on every member, sumToFirst() on the first.
void expectSums(bool first_only) {
  for (const size_t count : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
    expectNoErrors(runMates({2, 4, 6}, [&](HostMates& mates) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = float(i % 5) + float(mates.rank());
      first_only ? mates.sumToFirst(data.data(), count) : mates.sum(data.data(), count);
      if (first_only && mates.rank() != 0) return;
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += data[i] != 3.0f * float(i % 5) + 3.0f;
      EXPECT_EQ(wrong, 0u) << "count " << count << ", rank " << mates.rank();
    }));
  }
}

TEST(HostMates, SumsAnyCountOnEveryMember) { expectSums(false); }

TEST(HostMates, SumToFirstLeavesTheSumOnTheFirstMember) { expectSums(true); }

TEST(HostMates, OneMemberIsItsOwnSum) {
  expectNoErrors(runMates({3}, [](HostMates& mates) {
    std::vector<float> data = {1, 2, 3};
    mates.sum(data.data(), data.size());
    mates.sumToFirst(data.data(), data.size());
    EXPECT_EQ(data, (std::vector<float>{1, 2, 3}));
  }));
}

TEST(HostMates, AWorkerOutsideTheMembersIsRefused) {
  cluster::MemoryStore store;
  EXPECT_THROW(HostMates(store, "test", {0, 1}, 2, loopback()), Error);
}

// Worker 6 never arrives: worker 4 fails within the timeout, naming both.
TEST(HostMates, AHostMateThatNeverArrivesIsNamedAsItsWorker) {
  cluster::MemoryStore store;
  const auto start = Clock::now();
  try {
    HostMates mates(store, "test", {4, 6}, 4, loopback(500ms));
    FAIL() << "connected without worker 6";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("connecting with this host's workers (rank 0 is worker 4, rank 1 is worker 6)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - start, 10s);
}

}  // namespace
}  // namespace tandem::collective
