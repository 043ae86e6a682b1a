// Hierarchical all-reduce (collective/host_communicator): sums within each
// host, among the hosts' leaders, then back to the host. Ranks are threads
// on loopback here; the lab test (cli_lab_test) measures the host links.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cluster/kv_store.hpp"
#include "collective/host_communicator.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "support/exact_sums.hpp"

namespace tandem::collective {
namespace {

using namespace std::chrono_literals;
using testing::contribution;
using testing::expectedSum;
using testing::optionsFor;
using Groups = std::vector<std::vector<int>>;


int sizeOf(const Groups& groups) {
  int n = 0;
  for (const auto& g : groups) n += static_cast<int>(g.size());
  return n;
}

// Runs `body` on every rank of `groups`, one thread each; returns each
// rank's error ("" when it finished).
std::vector<std::string> runHosts(const Groups& groups, const std::function<void(Communicator&)>& body,
                                  std::chrono::milliseconds timeout = 10s) {
  const int size = sizeOf(groups);
  cluster::MemoryStore store;
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = connectByHost(store, optionsFor(r, size, timeout), groups);
        body(*comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}


void expectExactSums(const Groups& groups, size_t count) {
  const int size = sizeOf(groups);
  const auto errors = runHosts(
      groups,
      [&](Communicator& comm) {
        EXPECT_EQ(comm.size(), size);
        std::vector<float> data(count);
        for (int round = 0; round < 2; ++round) {  // the same buffer twice
          for (size_t i = 0; i < count; ++i) data[i] = contribution(comm.rank(), i);
          comm.allreduceSum(data.data(), count);
          size_t wrong = 0;
          for (size_t i = 0; i < count; ++i) wrong += data[i] != expectedSum(size, i);
          EXPECT_EQ(wrong, 0u) << "rank " << comm.rank() << " round " << round;
        }
        for (size_t i = 0; i < count; ++i) data[i] = contribution(comm.rank(), i);
        comm.allreduceSumOnce(data.data(), count);
        EXPECT_EQ(data[count - 1], expectedSum(size, count - 1)) << "rank " << comm.rank() << ", once";
      });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(HostCommunicator, SumsExactlyOverTwoHostsOfTwo) {
  expectExactSums({{0, 1}, {2, 3}}, 1001);
  expectExactSums({{0, 1}, {2, 3}}, 100'003);
  expectExactSums({{0, 2}, {1, 3}}, 1001);
}

TEST(HostCommunicator, SumsExactlyOverUnevenAndInterleavedHosts) {
  expectExactSums({{0, 2}, {1}, {3, 4, 5}}, 4099);
  expectExactSums({{1, 3}, {0, 2}}, 17);
}

TEST(HostCommunicator, SixteenBitSumsMatchTheFloatSum) {
  for (WireDtype dtype : {WireDtype::kFloat16, WireDtype::kBfloat16}) {
    const auto errors = runHosts({{0, 2}, {1, 3}}, [dtype](Communicator& comm) {
      constexpr size_t kCount = 513;
      std::vector<float> values(kCount);
      std::vector<uint16_t> wire(kCount);
      for (size_t i = 0; i < kCount; ++i) values[i] = contribution(comm.rank(), i);
      encodeWire(dtype, values.data(), wire.data(), kCount);
      comm.allreduceSum16(wire.data(), kCount, dtype);
      decodeWire(dtype, wire.data(), values.data(), kCount);
      for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(values[i], expectedSum(4, i)) << wireDtypeName(dtype) << " " << i;
    });
    for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

TEST(HostCommunicator, BroadcastAllgatherAndBarrierSpanEveryRank) {
  const auto errors = runHosts({{0, 3}, {1, 2}}, [](Communicator& comm) {
    int value = comm.rank() == 2 ? 42 : -1;
    comm.broadcast(&value, sizeof(value), 2);
    EXPECT_EQ(value, 42);
    const int mine = 10 * comm.rank();
    std::vector<int> all(4);
    comm.allgather(&mine, all.data(), sizeof(mine));
    EXPECT_EQ(all, (std::vector<int>{0, 10, 20, 30}));
    comm.barrier();
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(HostCommunicator, GroupsThatDoNotPartitionTheRanksAreRefused) {
  cluster::MemoryStore store;
  EXPECT_THROW(connectByHost(store, optionsFor(0, 3), {{0, 1}}), Error);          // rank 2 missing
  EXPECT_THROW(connectByHost(store, optionsFor(0, 3), {{0, 1}, {1, 2}}), Error);  // rank 1 twice
  EXPECT_THROW(connectByHost(store, optionsFor(0, 2), {{0, 1}, {}}), Error);
  EXPECT_THROW(connectByHost(store, optionsFor(0, 2), {{0, 5}}), Error);
}

// Worker 3 fails right after connecting. Its host-mate fails naming it,
// the other host's leader names the leader it lost, and nobody waits past
// the timeout.
TEST(HostCommunicator, AFailedHostMateIsNamedAsItsWorker) {
  const auto start = Clock::now();
  const auto errors = runHosts(
      {{0, 2}, {1, 3}},
      [](Communicator& comm) {
        if (comm.rank() == 3) throw std::runtime_error("worker 3 crashed");
        std::vector<float> data(1000, 1.0f);
        comm.allreduceSum(data.data(), data.size());
      },
      2s);
  EXPECT_LT(Clock::now() - start, 15s);
  // Worker 3 may fail while its host-mate still connects (under load) or
  // sums: either way the error names the group and which rank is which worker.
  EXPECT_NE(errors[1].find("this host's workers (rank 0 is worker 1, rank 1 is worker 3)"), std::string::npos)
      << errors[1];
  EXPECT_NE(errors[0].find("across hosts, one worker each (rank 0 is worker 0, rank 1 is worker 1)"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[2], "");
}

}  // namespace
}  // namespace tandem::collective
