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

TEST(KeyLayout, BadArgumentsAreNamed) {
  testing::expectInputError([] { buildKeyLayout({{"a", 10}}, 0, 4096); }, {"parameter servers"});
  testing::expectInputError([] { buildKeyLayout({{"a", 10}}, 1, 4095); }, {"--ps-chunk-mb"});
  testing::expectInputError([] { buildKeyLayout({}, 1, 4096); }, {"no parameters"});
}

}  // namespace
}  // namespace tandem::ps
