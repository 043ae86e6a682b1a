#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cluster/coordinator.hpp"
#include "cluster/kv_store.hpp"
#include "collective/bucket_reducer.hpp"
#include "collective/communicator.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "support/exact_sums.hpp"
#include "support/test_security.hpp"

namespace tandem::collective {
namespace {

using namespace std::chrono_literals;
using testing::contribution;
using testing::expectedSum;
using testing::optionsFor;


// Runs `body` on `size` ranks, one thread each, rendezvousing through an
// in-process store. Exceptions escaping a rank fail the test with its message.
void runRanks(int size, const std::function<void(Communicator&)>& body,
              std::chrono::milliseconds timeout = 10s) {
  cluster::MemoryStore store;
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = Communicator::connect(store, optionsFor(r, size, timeout));
        ASSERT_EQ(comm->rank(), r);
        ASSERT_EQ(comm->size(), size);
        body(*comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}


void expectAllreduceExact(int size, size_t count) {
  runRanks(size, [count](Communicator& comm) {
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = contribution(comm.rank(), i);
    comm.allreduceSum(data.data(), count);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += data[i] != expectedSum(comm.size(), i);
    EXPECT_EQ(wrong, 0u) << "rank " << comm.rank() << " first mismatch value " << data[0];
  });
}

// Below the default 4 MiB threshold: halving-doubling.
TEST(CommunicatorAllreduce, SmallBufferExactFor2Ranks) { expectAllreduceExact(2, 1000); }
TEST(CommunicatorAllreduce, SmallBufferExactFor3Ranks) { expectAllreduceExact(3, 1001); }
TEST(CommunicatorAllreduce, SmallBufferExactFor4Ranks) { expectAllreduceExact(4, 4099); }
// 12 MB buffers.
TEST(CommunicatorAllreduce, LargeBufferExactFor2Ranks) { expectAllreduceExact(2, 3'000'000); }
TEST(CommunicatorAllreduce, LargeBufferExactFor3Ranks) { expectAllreduceExact(3, 3'000'001); }
TEST(CommunicatorAllreduce, LargeBufferExactFor4Ranks) { expectAllreduceExact(4, 3'000'000); }

// Odd counts, counts below the rank count, and each buffer reduced twice.
TEST(CommunicatorAllreduce, OddAndTinyCountsAreExactTwiceFor2To4Ranks) {
  const std::vector<size_t> counts{1, 3, 1000, 100'003};
  for (int size : {2, 3, 4}) {
    runRanks(size, [&](Communicator& comm) {
      for (size_t count : counts) {
        std::vector<float> data(count);
        for (int round = 1; round <= 2; ++round) {
          for (size_t i = 0; i < count; ++i) data[i] = contribution(comm.rank(), i);
          comm.allreduceSum(data.data(), count);
          size_t wrong = 0;
          for (size_t i = 0; i < count; ++i) wrong += data[i] != expectedSum(comm.size(), i);
          EXPECT_EQ(wrong, 0u) << "rank " << comm.rank() << ", " << count << " floats, round " << round;
        }
      }
    });
  }
}

TEST(CommunicatorAllreduce, TinyAndEmptyBuffers) {
  runRanks(3, [](Communicator& comm) {
    float one = static_cast<float>(comm.rank() + 1);
    comm.allreduceSum(&one, 1);
    EXPECT_EQ(one, 6.0f);
    comm.allreduceSum(nullptr, 0);
  });
}

// Repeated calls on the same buffer reuse the cached algorithm; it must read
// the buffer's current contents each time, for both algorithms.
TEST(CommunicatorAllreduce, SameBufferReducedRepeatedlyStaysExact) {
  for (size_t count : {size_t{5000}, size_t{300'000}}) {
    runRanks(3, [count](Communicator& comm) {
      std::vector<float> data(count);
      for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < count; ++i) data[i] = contribution(comm.rank(), i);
        comm.allreduceSum(data.data(), count);
        for (size_t i = 0; i < count; i += 97) ASSERT_EQ(data[i], expectedSum(3, i)) << "round " << round;
      }
      // Every rank now holds the sum, so reducing again triples it.
      comm.allreduceSum(data.data(), count);
      for (size_t i = 0; i < count; i += 97) ASSERT_EQ(data[i], 3 * expectedSum(3, i)) << "third call";
      // A prefix of the same buffer is a different (data, count): its own algorithm.
      for (size_t i = 0; i < count; ++i) data[i] = contribution(comm.rank(), i);
      comm.allreduceSum(data.data(), count / 2);
      EXPECT_EQ(data[count / 2 - 1], expectedSum(3, count / 2 - 1));
      EXPECT_EQ(data[count / 2], contribution(comm.rank(), count / 2));
    });
  }
}

// More distinct buffers than the cache holds: eviction must keep ranks in step.
TEST(CommunicatorAllreduce, ManyDistinctBuffersOverflowTheCache) {
  runRanks(2, [](Communicator& comm) {
    std::vector<std::vector<float>> buffers;
    for (size_t n = 1; n <= 150; ++n) buffers.emplace_back(n);
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& b : buffers) {
        for (size_t i = 0; i < b.size(); ++i) b[i] = contribution(comm.rank(), i);
        comm.allreduceSum(b.data(), b.size());
        ASSERT_EQ(b.back(), expectedSum(2, b.size() - 1)) << "count " << b.size();
      }
    }
  });
}

// Fresh buffers of one size whose addresses differ per rank (a user's
// tensors): a rank-local cache hit here would leave ranks out of step.
TEST(CommunicatorAllreduce, OneOffBuffersAtRankDependentAddressesStayInStep) {
  runRanks(3, [](Communicator& comm) {
    std::vector<std::vector<float>> keep;  // a rank-dependent allocation pattern
    for (int call = 0; call < 20; ++call) {
      if ((call + comm.rank()) % 2 == 0) keep.emplace_back(7);
      std::vector<float> once(5);
      for (size_t i = 0; i < once.size(); ++i) once[i] = contribution(comm.rank(), i);
      comm.allreduceSumOnce(once.data(), once.size());
      for (size_t i = 0; i < once.size(); ++i) ASSERT_EQ(once[i], expectedSum(3, i)) << "call " << call;
    }
  });
}

// fp16 and bf16 sums over 4 ranks: each value within the rounding that
// three additions in the 16-bit format allow of the float32 sum of what the
// ranks sent (after their own rounding), and identical on every rank.
TEST(CommunicatorAllreduce, SixteenBitSumsStayWithinTheirRoundingOfTheFloatSum) {
  constexpr size_t kCount = 300'001;  // odd, and more than one Gloo segment
  for (WireDtype dtype : {WireDtype::kFloat16, WireDtype::kBfloat16}) {
    std::vector<std::vector<uint16_t>> results(4);
    runRanks(4, [&](Communicator& comm) {
      std::vector<float> mine(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        mine[i] = std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(comm.rank())) * 1e-2f;
      }
      std::vector<uint16_t> wire(kCount);
      encodeWire(dtype, mine.data(), wire.data(), kCount);
      comm.allreduceSum16(wire.data(), kCount, dtype);
      results[static_cast<size_t>(comm.rank())] = wire;
    });
    for (int r = 1; r < 4; ++r) ASSERT_EQ(results[static_cast<size_t>(r)], results[0]) << "rank " << r;
    const double unit = dtype == WireDtype::kFloat16 ? 0x1p-11 : 0x1p-8;
    size_t wrong = 0;
    double worst = 0;
    for (size_t i = 0; i < kCount; ++i) {
      double exact = 0, magnitude = 0;
      for (int r = 0; r < 4; ++r) {
        std::vector<float> one = {std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(r)) * 1e-2f};
        uint16_t sent = 0;
        encodeWire(dtype, one.data(), &sent, 1);
        float back = 0;
        decodeWire(dtype, &sent, &back, 1);
        exact += back;
        magnitude += std::fabs(back);
      }
      float got = 0;
      decodeWire(dtype, &results[0][i], &got, 1);
      // Three roundings, each at most half an ulp of a partial sum no larger
      // than the sum of magnitudes (fp16's subnormal spacing as the floor).
      const double bound = 3 * unit * std::max(magnitude, 0x1p-14) + 1e-12;
      worst = std::max(worst, std::fabs(got - exact) / bound);
      wrong += std::fabs(got - exact) > bound;
    }
    EXPECT_EQ(wrong, 0u) << wireDtypeName(dtype) << ": worst error " << worst << " of the bound";
  }
}

// The bucket reducer: a 16-bit body, an exact float32 tail, and the bytes
// each format puts on the wire.
TEST(BucketReducer, RoundsTheBodyKeepsTheTailExactAndCountsWireBytes) {
  runRanks(2, [](Communicator& comm) {
    const float mine = comm.rank() == 0 ? 0.1f : 0.2f;
    for (WireDtype wire : {WireDtype::kFloat32, WireDtype::kBfloat16}) {
      BucketReducer reducer(comm, wire, false);
      std::vector<float> bucket(10, mine);
      const size_t bytes = reducer.reduce(0, bucket.data(), bucket.size(), 3);
      float sent_back[2] = {0.1f, 0.2f};
      if (wire != WireDtype::kFloat32) {
        uint16_t bits[2];
        encodeWire(wire, sent_back, bits, 2);
        decodeWire(wire, bits, sent_back, 2);
      }
      const float body = [&] {
        float sum = sent_back[0] + sent_back[1];
        if (wire == WireDtype::kFloat32) return sum;
        uint16_t bits;
        encodeWire(wire, &sum, &bits, 1);
        decodeWire(wire, &bits, &sum, 1);
        return sum;
      }();
      for (size_t i = 0; i < 7; ++i) EXPECT_EQ(bucket[i], body) << wireDtypeName(wire) << " " << i;
      for (size_t i = 7; i < 10; ++i) EXPECT_EQ(bucket[i], 0.1f + 0.2f) << wireDtypeName(wire) << " tail " << i;
      EXPECT_EQ(bytes, wire == WireDtype::kFloat32 ? 40u : 7u * 2 + 3 * 4);
    }
    EXPECT_NE(bfloat16ToFloat(floatToBfloat16(0.1f)) + bfloat16ToFloat(floatToBfloat16(0.2f)), 0.1f + 0.2f);
  });
}

TEST(CommunicatorBroadcast, CopiesRootOneToEveryRank) {
  constexpr size_t kBytes = 100'003;
  runRanks(3, [](Communicator& comm) {
    std::vector<uint8_t> data(kBytes, 0);
    if (comm.rank() == 1) {
      for (size_t i = 0; i < kBytes; ++i) data[i] = static_cast<uint8_t>(i * 7 + 1);
    }
    comm.broadcast(data.data(), kBytes, 1);
    size_t wrong = 0;
    for (size_t i = 0; i < kBytes; ++i) wrong += data[i] != static_cast<uint8_t>(i * 7 + 1);
    EXPECT_EQ(wrong, 0u) << "rank " << comm.rank();
  });
}

TEST(CommunicatorBroadcast, RejectsRootOutOfRangeWithoutBreaking) {
  runRanks(2, [](Communicator& comm) {
    int value = comm.rank() == 0 ? 42 : 0;
    EXPECT_THROW(comm.broadcast(&value, sizeof value, 2), Error);
    comm.broadcast(&value, sizeof value, 0);
    EXPECT_EQ(value, 42);
  });
}

TEST(CommunicatorAllgather, PlacesEachRanksBytesAtItsOffset) {
  constexpr size_t kBytes = 1001;
  runRanks(4, [](Communicator& comm) {
    std::vector<uint8_t> in(kBytes);
    for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<uint8_t>(comm.rank() * 50 + i);
    std::vector<uint8_t> out(4 * kBytes, 0xff);
    comm.allgather(in.data(), out.data(), kBytes);
    for (int r = 0; r < 4; ++r) {
      for (size_t i = 0; i < kBytes; ++i) {
        ASSERT_EQ(out[r * kBytes + i], static_cast<uint8_t>(r * 50 + i)) << "rank " << r << " byte " << i;
      }
    }
  });
}

TEST(CommunicatorAllgather, WorksInPlaceAndForOneByte) {
  runRanks(3, [](Communicator& comm) {
    std::vector<int32_t> out(3, -1);
    out[comm.rank()] = 100 + comm.rank();
    comm.allgather(&out[comm.rank()], out.data(), sizeof(int32_t));
    EXPECT_EQ(out, (std::vector<int32_t>{100, 101, 102}));

    const uint8_t mine = static_cast<uint8_t>(comm.rank() + 1);
    std::vector<uint8_t> bytes(3, 0);
    comm.allgather(&mine, bytes.data(), 1);
    EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3}));
  });
}

// Rank s sends rank r (s + 2r) % 5 bytes (some of them zero), each byte
// naming sender, receiver and position; run twice, so that an empty message
// left unmatched by the first exchange would corrupt the second.
TEST(CommunicatorAlltoallv, DeliversEachRanksBlockIncludingEmptyOnes) {
  runRanks(3, [](Communicator& comm) {
    const auto bytes = [](int from, int to) { return static_cast<size_t>((from + 2 * to) % 5); };
    const auto value = [](int from, int to, size_t i) { return static_cast<uint8_t>(100 * from + 10 * to + i); };
    const int me = comm.rank();
    for (int round = 0; round < 2; ++round) {
      std::vector<size_t> send(3), recv(3);
      std::vector<uint8_t> in;
      for (int r = 0; r < 3; ++r) {
        send[r] = bytes(me, r);
        recv[r] = bytes(r, me);
        for (size_t i = 0; i < send[r]; ++i) in.push_back(value(me, r, i + round));
      }
      std::vector<uint8_t> out(recv[0] + recv[1] + recv[2], 0xff);
      comm.alltoallv(in.data(), send, out.data(), recv);
      size_t at = 0;
      for (int r = 0; r < 3; ++r) {
        for (size_t i = 0; i < recv[r]; ++i, ++at) {
          ASSERT_EQ(out[at], value(r, me, i + round)) << "rank " << me << " from " << r << " byte " << i;
        }
      }
    }
    // Nothing at all to move still runs (and matches) on every rank.
    comm.alltoallv(nullptr, {0, 0, 0}, nullptr, {0, 0, 0});
    EXPECT_THROW(comm.alltoallv(nullptr, {0, 0}, nullptr, {0, 0}), Error);
  });
}

TEST(CommunicatorBarrier, NoRankLeavesBeforeAllArrive) {
  std::atomic<int> arrived{0};
  runRanks(3, [&](Communicator& comm) {
    if (comm.rank() == 0) std::this_thread::sleep_for(200ms);
    ++arrived;
    comm.barrier();
    EXPECT_EQ(arrived.load(), 3) << "rank " << comm.rank() << " left the barrier early";
    comm.barrier();
  });
}

// Any use of the store fails: proves size 1 needs no rendezvous or network.
class UnreachableStore : public cluster::KeyValueStore {
 public:
  void set(const std::string& key, const std::vector<char>&) override { ADD_FAILURE() << "set " << key; }
  std::vector<char> get(const std::string& key) override {
    ADD_FAILURE() << "get " << key;
    return {};
  }
  void wait(const std::vector<std::string>&, std::chrono::milliseconds) override { ADD_FAILURE() << "wait"; }
  std::chrono::milliseconds timeout() const override { return 1s; }
};

TEST(CommunicatorSolo, SizeOneIsLocalAndCollectivesAreIdentity) {
  UnreachableStore store;
  auto comm = Communicator::connect(store, optionsFor(0, 1));
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> data{1.5f, -2.0f, 3.0f};
  comm->allreduceSum(data.data(), data.size());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  comm->broadcast(data.data(), sizeof(float) * data.size(), 0);
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  std::vector<float> gathered(3, 0.0f);
  comm->allgather(data.data(), gathered.data(), sizeof(float) * data.size());
  EXPECT_EQ(gathered, data);
  comm->barrier();
  EXPECT_THROW(comm->broadcast(data.data(), 4, 1), Error);
}

TEST(CommunicatorConnect, RejectsInvalidRankAndSize) {
  cluster::MemoryStore store;
  EXPECT_THROW(Communicator::connect(store, optionsFor(2, 2)), Error);
  EXPECT_THROW(Communicator::connect(store, optionsFor(-1, 2)), Error);
  EXPECT_THROW(Communicator::connect(store, optionsFor(0, 0)), Error);
}

// The chief's coordinator is the rendezvous of every real job: three ranks
// connect through it, sum, and pass a barrier.
TEST(CommunicatorConnect, RendezvousThroughTheCoordinatorStore) {
  cluster::CoordinatorServer server("127.0.0.1", 0, tandem::testing::testSecurity());
  constexpr int kSize = 3;
  std::vector<std::string> errors(kSize);
  std::vector<std::vector<float>> results(kSize);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kSize; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        cluster::CoordinatorClient client(cluster::HostPort{"127.0.0.1", server.port()}, 10s, tandem::testing::testSecurity());
        auto comm = Communicator::connect(client, optionsFor(rank, kSize));
        std::vector<float> data(1000);
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((rank + 1) * i);
        comm->allreduceSum(data.data(), data.size());
        comm->barrier();
        results[rank] = data;
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < kSize; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    ASSERT_EQ(results[rank].size(), 1000u);
    for (size_t i = 0; i < 1000; i += 111) EXPECT_EQ(results[rank][i], static_cast<float>(6 * i)) << rank << " " << i;
  }
}

TEST(CommunicatorConnect, MissingPeerThrowsPeerError) {
  cluster::MemoryStore store;
  const auto start = Clock::now();
  try {
    Communicator::connect(store, optionsFor(0, 2, 500ms));
    FAIL() << "connect without rank 1 succeeded";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("connect"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0 of 2"), std::string::npos) << what;
  }
  EXPECT_LT(Clock::now() - start, 5s);
}

// Ranks in `callers` run `op`; the others connect and then stay silent
// (alive, connection open) until the callers are done, like a stalled peer.
void expectStallDetected(int size, const std::vector<int>& callers,
                         const std::function<void(Communicator&)>& op, const std::string& op_name,
                         const std::string& named_peer = "") {
  constexpr auto kTimeout = 500ms;
  cluster::MemoryStore store;
  std::promise<void> callers_done_promise;
  auto callers_done = callers_done_promise.get_future().share();
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    const bool caller = std::find(callers.begin(), callers.end(), r) != callers.end();
    threads.emplace_back([&, r, caller] {
      auto comm = Communicator::connect(store, optionsFor(r, size, kTimeout));
      if (!caller) {
        callers_done.wait();
        return;
      }
      const auto start = Clock::now();
      try {
        op(*comm);
        ADD_FAILURE() << "rank " << r << ": " << op_name << " finished without the silent peer";
      } catch (const PeerError& e) {
        const auto waited = Clock::now() - start;
        const std::string what = e.what();
        EXPECT_NE(what.find(op_name), std::string::npos) << what;
        EXPECT_NE(what.find("rank " + std::to_string(r)), std::string::npos) << what;
        EXPECT_LT(waited, kTimeout + 3s) << what;
        if (!named_peer.empty()) {
          EXPECT_NE(what.find(named_peer), std::string::npos) << what;
        }
        // The communicator is now unusable, and says why.
        try {
          comm->barrier();
          ADD_FAILURE() << "rank " << r << ": barrier after failure succeeded";
        } catch (const PeerError& again) {
          const std::string refused = again.what();
          EXPECT_NE(refused.find("unusable after an earlier failure"), std::string::npos) << refused;
          EXPECT_NE(refused.find(op_name), std::string::npos) << refused;
        }
        float x = 1.0f;
        EXPECT_THROW(comm->allreduceSum(&x, 1), PeerError);
      }
      if (++finished == static_cast<int>(callers.size())) callers_done_promise.set_value();
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CommunicatorFault, SilentPeerFailsSmallAllreduceWithinTimeout) {
  expectStallDetected(
      3, {0, 1},
      [](Communicator& comm) {
        std::vector<float> data(1000, 1.0f);
        comm.allreduceSum(data.data(), data.size());
      },
      "allreduce of 1000 floats");
}

TEST(CommunicatorFault, SilentPeerFailsLargeAllreduceWithinTimeout) {
  expectStallDetected(
      2, {0},
      [](Communicator& comm) {
        std::vector<float> data(1'000'000, 1.0f);
        comm.allreduceSum(data.data(), data.size());
      },
      "allreduce of 1000000 floats", "is rank 1)");
}

TEST(CommunicatorFault, SilentPeerFailsBarrierWithinTimeout) {
  expectStallDetected(3, {1, 2}, [](Communicator& comm) { comm.barrier(); }, "barrier");
}

// A peer that failed and went away: the survivor fails fast, and the error
// names the peer.
TEST(CommunicatorFault, ClosedPeerFailsAllreduceNamingThePeer) {
  cluster::MemoryStore store;
  std::promise<void> connected_promise;
  std::promise<void> closed_promise;
  auto closed = closed_promise.get_future();
  std::thread peer([&] {
    try {
      auto comm = Communicator::connect(store, optionsFor(1, 2, 10s));
      // Closing while rank 0 is still inside connect would fail connect instead.
      connected_promise.get_future().wait();
      // Unwinding closes at once, without the orderly closing barrier.
      throw std::runtime_error("rank 1 crashed");
    } catch (const std::runtime_error&) {
    }
    closed_promise.set_value();
  });
  auto comm = Communicator::connect(store, optionsFor(0, 2, 10s));
  connected_promise.set_value();
  closed.wait();
  const auto start = Clock::now();
  std::vector<float> data(1000, 1.0f);
  try {
    comm->allreduceSum(data.data(), data.size());
    ADD_FAILURE() << "allreduce with a closed peer succeeded";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("allreduce of 1000 floats failed on rank 0 of 2"), std::string::npos) << what;
    EXPECT_NE(what.find("127.0.0.1"), std::string::npos) << what;
    EXPECT_NE(what.find("is rank 1)"), std::string::npos) << what;
  }
  EXPECT_LT(Clock::now() - start, 5s);
  peer.join();
}

}  // namespace
}  // namespace tandem::collective
