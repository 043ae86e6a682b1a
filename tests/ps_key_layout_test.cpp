#include <gtest/gtest.h>

#include <algorithm>

#include "ps/key_layout.hpp"
#include "support/expect_input_error.hpp"

namespace tandem::ps {
namespace {

TEST(KeyLayout, ChunksCoverTheKeySpaceInOrderAndBalanceServersWithinOneChunk) {
  // One big tensor among small ones, as in an MLP: 16M + 4K + 1M floats.
  std::vector<TensorSpec> tensors{{"fc1.weight", 16 << 20}, {"fc1.bias", 4096}, {"fc2.weight", 1 << 20}};
  const int64_t chunk_bytes = 4 << 20;  // 1M floats
  KeyLayout layout = buildKeyLayout(tensors, 3, chunk_bytes);
  EXPECT_EQ(layout.total_floats, (16 << 20) + 4096 + (1 << 20));
  EXPECT_EQ(layout.tensor_offsets, (std::vector<int64_t>{0, 16 << 20, (16 << 20) + 4096}));
  int64_t next = 0;
  for (size_t i = 0; i < layout.chunks.size(); ++i) {
    EXPECT_EQ(layout.chunks[i].key, i);
    EXPECT_EQ(layout.chunks[i].begin, next);
    next += layout.chunks[i].length;
  }
  EXPECT_EQ(next, layout.total_floats);
  EXPECT_EQ(layout.chunks.size(), 18u);  // 17 full chunks and a 4K tail
  // fc1.weight alone is spread over every server.
  std::vector<int> servers_of_fc1;
  for (const auto& c : layout.chunks) {
    if (c.begin < (16 << 20)) servers_of_fc1.push_back(c.server);
  }
  for (int s = 0; s < 3; ++s) EXPECT_NE(std::count(servers_of_fc1.begin(), servers_of_fc1.end(), s), 0) << s;
  auto [lo, hi] = std::minmax_element(layout.server_floats.begin(), layout.server_floats.end());
  EXPECT_LE(*hi - *lo, chunk_bytes / 4);
  int64_t held = 0;
  for (int s = 0; s < 3; ++s) {
    for (const auto& c : layout.chunksOf(s)) held += c.length;
  }
  EXPECT_EQ(held, layout.total_floats);
}

TEST(KeyLayout, SameInputsSameFingerprintAnyChangeDiffers) {
  std::vector<TensorSpec> tensors{{"a", 1000}, {"b", 3000}};
  auto base = buildKeyLayout(tensors, 2, 4096).fingerprint();
  EXPECT_EQ(base, buildKeyLayout(tensors, 2, 4096).fingerprint());
  EXPECT_NE(base, buildKeyLayout(tensors, 3, 4096).fingerprint());
  EXPECT_NE(base, buildKeyLayout(tensors, 2, 8192).fingerprint());
  EXPECT_NE(base, buildKeyLayout({{"a", 1000}, {"c", 3000}}, 2, 4096).fingerprint());
  EXPECT_NE(base, buildKeyLayout({{"a", 1001}, {"b", 2999}}, 2, 4096).fingerprint());
}

// --ps-replicas 2: every chunk's backup is the server after its primary,
// so each server holds its own chunks and its predecessor's, and any one
// server's death leaves every chunk a holder.
TEST(KeyLayout, TwoReplicasPutEachChunkOnTheNextServerToo) {
  const std::vector<TensorSpec> tensors{{"a", 1000}, {"b", 3000}};
  const KeyLayout one = buildKeyLayout(tensors, 3, 4096);
  const KeyLayout two = buildKeyLayout(tensors, 3, 4096, 2);
  EXPECT_EQ(one.replicas(), 1);
  EXPECT_EQ(two.replicas(), 2);
  ASSERT_EQ(one.chunks.size(), two.chunks.size());
  for (size_t c = 0; c < two.chunks.size(); ++c) {
    EXPECT_EQ(two.chunks[c].server, one.chunks[c].server) << "the primaries stay where they were";
    EXPECT_EQ(two.chunks[c].backup, (two.chunks[c].server + 1) % 3);
    EXPECT_EQ(two.chunks[c].holders(), (std::vector<int>{two.chunks[c].server, two.chunks[c].backup}));
    EXPECT_EQ(one.chunks[c].holders(), (std::vector<int>{one.chunks[c].server}));
  }
  for (int dead = 0; dead < 3; ++dead) {
    for (const auto& c : two.chunks) EXPECT_TRUE(c.server != dead || c.backup != dead);
  }
  int64_t held = 0;
  for (int s = 0; s < 3; ++s) {
    for (const auto& c : two.chunksHeldBy(s)) held += c.length;
  }
  EXPECT_EQ(held, 2 * two.total_floats);
  EXPECT_NE(one.fingerprint(), two.fingerprint());
  testing::expectInputError([&] { buildKeyLayout(tensors, 2, 4096, 3); }, {"--ps-replicas 3 with 2 server(s)"});
  testing::expectInputError([&] { buildKeyLayout(tensors, 1, 4096, 2); }, {"--ps-replicas 2 with 1 server(s)"});
}

TEST(KeyLayout, BadArgumentsAreNamed) {
  testing::expectInputError([] { buildKeyLayout({{"a", 10}}, 0, 4096); }, {"parameter servers"});
  testing::expectInputError([] { buildKeyLayout({{"a", 10}}, 1, 4095); }, {"--ps-chunk-mb"});
  testing::expectInputError([] { buildKeyLayout({}, 1, 4096); }, {"no parameters"});
}

// A layout of one tensor of `floats`, cut as chunkFloatsFor says.
KeyLayout smallModelLayout(int64_t floats, int64_t requested_chunk_floats, int servers) {
  const int64_t chunk = chunkFloatsFor(floats, requested_chunk_floats, servers);
  return buildKeyLayout({{"w", floats}}, servers, chunk * 4);
}

TEST(ChunkFloatsFor, AModelWithEnoughChunksKeepsTheRequestedSize) {
  const int64_t mb4 = 1 << 20;  // floats in a 4 MB chunk
  EXPECT_EQ(chunkFloatsFor((16 << 20) + 4096 + (1 << 20), mb4, 3), mb4);
  EXPECT_EQ(chunkFloatsFor(2 * mb4, mb4, 2), mb4) << "exactly one chunk per server";
  EXPECT_EQ(chunkFloatsFor(mb4 + 1, mb4, 2), mb4) << "a one-float tail is still a chunk";
  EXPECT_EQ(chunkFloatsFor(100, 7, 1), 7) << "one server never needs smaller chunks";
  EXPECT_EQ(chunkFloatsFor(0, mb4, 4), mb4) << "nothing to spread";
}

TEST(ChunkFloatsFor, ASmallModelIsSplitSoThatBothServersHoldData) {
  const int64_t floats = 1'100'000 / 4;  // a 1.1 MB model
  const int64_t mb4 = (int64_t{4} << 20) / 4;
  // Today's fixed chunks leave server 1 empty.
  EXPECT_EQ(idleServers(buildKeyLayout({{"w", floats}}, 2, mb4 * 4)), (std::vector<int>{1}));
  EXPECT_EQ(chunkFloatsFor(floats, mb4, 2), 137'500);
  KeyLayout layout = smallModelLayout(floats, mb4, 2);
  EXPECT_EQ(layout.chunks.size(), 2u);
  EXPECT_EQ(layout.server_floats, (std::vector<int64_t>{137'500, 137'500}));
  EXPECT_EQ(idleServers(layout), std::vector<int>{});
}

TEST(ChunkFloatsFor, PrefersTheEvenSplitAndFallsBackWhenItGivesTooFewChunks) {
  // ceil(100 / 3) = 34: three chunks, as even as it gets.
  EXPECT_EQ(chunkFloatsFor(100, 1000, 3), 34);
  EXPECT_EQ(smallModelLayout(100, 1000, 3).server_floats, (std::vector<int64_t>{34, 34, 32}));
  EXPECT_EQ(chunkFloatsFor(10, 1000, 4), 3);
  EXPECT_EQ(smallModelLayout(10, 1000, 4).server_floats, (std::vector<int64_t>{3, 3, 3, 1}));
  // ceil(5 / 4) = 2 makes only 3 chunks; floor(5 / 4) = 1 makes 5.
  EXPECT_EQ(chunkFloatsFor(5, 1000, 4), 1);
  EXPECT_EQ(smallModelLayout(5, 1000, 4).server_floats, (std::vector<int64_t>{2, 1, 1, 1}));
}

TEST(ChunkFloatsFor, FewerFloatsThanServersLeavesTheRestIdleAndNamed) {
  EXPECT_EQ(chunkFloatsFor(3, 1 << 20, 4), 1);
  KeyLayout layout = smallModelLayout(3, 1 << 20, 4);
  EXPECT_EQ(layout.server_floats, (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(idleServers(layout), (std::vector<int>{3}));
  EXPECT_EQ(idleServers(buildKeyLayout({{"w", 0}}, 2, 4096)), (std::vector<int>{0, 1}));
}

TEST(ChunkFloatsFor, EveryServerThatCanHoldDataDoesAndChunksNeverGrow) {
  for (int64_t floats = 1; floats <= 60; ++floats) {
    for (int servers = 1; servers <= 8; ++servers) {
      for (int64_t requested : {1, 4, 64, 1000}) {
        const int64_t chunk = chunkFloatsFor(floats, requested, servers);
        SCOPED_TRACE(::testing::Message() << floats << " floats, " << servers << " servers, asked " << requested);
        EXPECT_GE(chunk, 1);
        EXPECT_LE(chunk, requested);
        if ((floats + requested - 1) / requested >= servers) {
          EXPECT_EQ(chunk, requested);
        }
        const auto idle = idleServers(buildKeyLayout({{"w", floats}}, servers, chunk * 4));
        EXPECT_EQ(static_cast<int64_t>(idle.size()), std::max<int64_t>(0, servers - floats));
      }
    }
  }
}

TEST(ChunkFloatsFor, BadArgumentsAreNamed) {
  testing::expectInputError([] { chunkFloatsFor(10, 4, 0); }, {"parameter servers"});
  testing::expectInputError([] { chunkFloatsFor(10, 0, 2); }, {"--ps-chunk-mb"});
  testing::expectInputError([] { chunkFloatsFor(-1, 4, 2); }, {"negative"});
}

}  // namespace
}  // namespace tandem::ps

namespace tandem::ps {
namespace {

// --ps-chunk-mb 0: about 16 chunks a server and at least 32, none over 4
// MiB, none under 32 KiB (16 KiB once there are more than 32).
TEST(AutoPsChunkFloats, ThirtyTwoChunksWithinTheirBounds) {
  for (int servers : {1, 2}) {
    EXPECT_EQ(autoPsChunkFloats(269722, servers), 8429);       // resnet20, 1.08 MB: 32 chunks of 33.7 KB
    EXPECT_EQ(autoPsChunkFloats(1727962, servers), 53999);     // resnet110, 6.9 MB: 32 chunks of 216 KB
    EXPECT_EQ(autoPsChunkFloats(60192808, servers), 1 << 20);  // resnet152, 241 MB: 4 MiB chunks
    EXPECT_EQ(autoPsChunkFloats(52650, servers), 8192);        // a small MLP: 32 KiB chunks (7)
    EXPECT_EQ(autoPsChunkFloats(1, servers), 8192);
  }
  for (int64_t floats : {int64_t{1} << 18, int64_t{3} << 18, int64_t{32} << 18}) {
    const int64_t chunks = (floats + autoPsChunkFloats(floats, 2) - 1) / autoPsChunkFloats(floats, 2);
    EXPECT_EQ(chunks, 32) << floats;
  }
}

TEST(AutoPsChunkFloats, SixteenChunksAServerBeyondTwoServers) {
  EXPECT_EQ(autoPsChunkFloats(269722, 4), 4215);       // resnet20 on 4 servers: 64 chunks of 16.9 KB
  EXPECT_EQ(autoPsChunkFloats(269722, 3), 5620);       // 48 chunks
  EXPECT_EQ(autoPsChunkFloats(1727962, 4), 27000);     // resnet110: 64 chunks of 108 KB
  EXPECT_EQ(autoPsChunkFloats(60192808, 4), 940513);   // resnet152: 64 chunks of 3.76 MB (58 of 4 MiB on 2)
  EXPECT_EQ(autoPsChunkFloats(60192808, 8), 470257);   // 128 chunks of 1.88 MB
  EXPECT_EQ(autoPsChunkFloats(1'000'000'000, 8), 1 << 20);  // still at most 4 MiB
  const int64_t floats = int64_t{192} << 18;           // 192 MiB over 12 servers: 192 chunks of 1 MiB
  EXPECT_EQ(autoPsChunkFloats(floats, 12), floats / 192);
}

// Where 16 KiB bounds the count, every server gets as many chunks: 66 of
// 16 KiB would leave two of 8 servers a ninth chunk, and their links 1/8
// more to carry.
TEST(AutoPsChunkFloats, AsManyChunksOnEveryServerWhereTheFloorBinds) {
  EXPECT_EQ(autoPsChunkFloats(269722, 8), 4215);   // resnet20 on 8: 64 chunks of 16.9 KB, 8 a server
  EXPECT_EQ(autoPsChunkFloats(269722, 16), 4215);  // on 16: 64, 4 a server
  EXPECT_EQ(autoPsChunkFloats(52650, 4), 4388);    // the small MLP on 4: 12 chunks, 3 a server
  EXPECT_EQ(autoPsChunkFloats(52650, 8), 6582);    // on 8: one chunk a server
  EXPECT_EQ(autoPsChunkFloats(52650, 16), 4096);   // fewer 16 KiB chunks than servers: the floor
  for (int servers : {3, 4, 5, 6, 7, 8, 12, 16}) {
    for (int64_t floats : {int64_t{100'000}, int64_t{269722}, int64_t{1'000'003}}) {
      const KeyLayout layout = buildKeyLayout({{"w", floats}}, servers, 4 * autoPsChunkFloats(floats, servers));
      const auto [fewest, most] = std::minmax_element(layout.server_floats.begin(), layout.server_floats.end());
      if (static_cast<int64_t>(layout.chunks.size()) < servers) continue;
      EXPECT_EQ(layout.chunks.size() % static_cast<size_t>(servers), 0u) << floats << " on " << servers;
      EXPECT_LE(*most - *fewest, layout.chunks.front().length) << floats << " on " << servers;
      EXPECT_GE(layout.chunks.front().length, 4096);
    }
  }
}

}  // namespace
}  // namespace tandem::ps
