// The model's parameters as a parameter-server layout's chunks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "support/held_transfer.hpp"
#include "train/chunked_parameters.hpp"

namespace tandem::train {
namespace {

// Three parameters of 6, 4 and 5 floats in chunks of 4: chunk 1 ends the
// first parameter and chunk 3 holds the second's end and the third's start.
struct Fixture {
  std::vector<torch::Tensor> params{torch::arange(0, 6, torch::kFloat32).view({2, 3}),
                                    torch::arange(100, 104, torch::kFloat32), torch::arange(200, 205, torch::kFloat32)};
  ps::KeyLayout layout = ps::buildKeyLayout({{"a", 6}, {"b", 4}, {"c", 5}}, 2, 4 * 4);
};

TEST(ChunkedParameters, GatherFollowsKeyOrderAcrossParameterBoundaries) {
  Fixture f;
  ASSERT_EQ(f.layout.chunks.size(), 4u);
  ChunkedParameters model(f.params, f.layout);
  EXPECT_EQ(model.gather(0), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(model.gather(1), (std::vector<float>{4, 5, 100, 101}));
  EXPECT_EQ(model.gather(2), (std::vector<float>{102, 103, 200, 201}));
  EXPECT_EQ(model.gather(3), (std::vector<float>{202, 203, 204}));
}

TEST(ChunkedParameters, ScatterWritesOnlyItsChunkAndDecodesTheWire) {
  Fixture f;
  ChunkedParameters model(f.params, f.layout);
  const std::vector<float> values{-1, -2, -3, -4};
  model.scatter(1, values.data(), WireDtype::kFloat32);
  EXPECT_TRUE(torch::equal(f.params[0], torch::tensor({0.f, 1.f, 2.f, 3.f, -1.f, -2.f}).view({2, 3})));
  EXPECT_TRUE(torch::equal(f.params[1], torch::tensor({-3.f, -4.f, 102.f, 103.f})));
  std::vector<uint16_t> bf16(3);
  encodeWire(WireDtype::kBfloat16, std::vector<float>{0.5f, 1.5f, -2.f}.data(), bf16.data(), 3);
  model.scatter(3, bf16.data(), WireDtype::kBfloat16);
  EXPECT_TRUE(torch::equal(f.params[2], torch::tensor({200.f, 201.f, 0.5f, 1.5f, -2.f})));
}

TEST(ChunkedParameters, ChunksThroughCountsTheChunksTheFirstParametersNeed) {
  Fixture f;
  ChunkedParameters model(f.params, f.layout);
  EXPECT_EQ(model.chunksThrough(0), 0u);
  EXPECT_EQ(model.chunksThrough(1), 2u);  // floats 0-5
  EXPECT_EQ(model.chunksThrough(2), 3u);  // floats 0-9
  EXPECT_EQ(model.chunksThrough(3), 4u);
  EXPECT_EQ(model.chunksThrough(99), 4u);
}

TEST(ChunkedParameters, PlacedParametersKeepTheirValuesAndSeeWritesToTheFlatModel) {
  Fixture f;
  const torch::Tensor held = f.params[1];  // another handle, as a module or optimizer keeps
  ChunkedParameters model(f.params, f.layout);
  torch::Tensor flat = torch::full({f.layout.total_floats}, -7.f);
  model.placeIn(flat);
  for (size_t c = 0; c < model.chunks(); ++c) {
    const auto expected = Fixture{}.params;  // the values before placing
    EXPECT_EQ(model.gather(c), ChunkedParameters(expected, f.layout).gather(c)) << c;
  }
  EXPECT_EQ(held.data_ptr<float>(), flat.data_ptr<float>() + 6);
  flat[7] = 42.f;  // as a server's pull writes it
  EXPECT_EQ(held[1].item<float>(), 42.f);
  // A pull that landed in place is not copied over itself.
  model.scatter(1, flat.data_ptr<float>() + 4, WireDtype::kFloat32);
  EXPECT_EQ(model.gather(1), (std::vector<float>{4, 5, 100, 42}));
}

// Staged, as a GPU model is: the parameters move into one flat buffer (the
// same tensors: an optimizer's keys), params() are host copies, and each
// scattered chunk goes on to the parameters at once, one copy per chunk,
// without rewriting a host copy a copy is still reading.
TEST(ChunkedParameters, StagedChunksGoOnToTheParametersOneCopyEach) {
  Fixture f;
  const torch::Tensor held = f.params[1];
  auto transfer = std::make_shared<testing::HeldTransfer>();
  ChunkedParameters model(f.params, f.layout, transfer);
  ASSERT_TRUE(model.staged());
  EXPECT_TRUE(model.trained()[1].is_same(held));
  EXPECT_TRUE(torch::equal(held, torch::arange(100, 104, torch::kFloat32)));
  EXPECT_EQ(model.trained()[1].data_ptr<float>(), model.trained()[0].data_ptr<float>() + 6) << "one flat buffer";
  EXPECT_NE(model.params()[1].data_ptr<float>(), held.data_ptr<float>()) << "params() are copies";
  EXPECT_EQ(model.gather(2), (std::vector<float>{102, 103, 200, 201}));

  const std::vector<float> values{-1, -2, -3, -4};
  model.scatter(1, values.data(), WireDtype::kFloat32);
  EXPECT_EQ(transfer->to_device, 1);
  EXPECT_TRUE(torch::equal(held, torch::tensor({-3.f, -4.f, 102.f, 103.f})));
  EXPECT_TRUE(torch::equal(f.params[0], torch::tensor({0.f, 1.f, 2.f, 3.f, -1.f, -2.f}).view({2, 3})));
  EXPECT_TRUE(torch::equal(f.params[2], torch::arange(200, 205, torch::kFloat32))) << "chunk 1 only";
  const std::vector<float> again{5, 6, 7, 8};
  model.scatter(1, again.data(), WireDtype::kFloat32);
  EXPECT_TRUE(torch::equal(held, torch::tensor({7.f, 8.f, 102.f, 103.f})));
  transfer->checkHazards();
  EXPECT_TRUE(transfer->rewritten_early.empty()) << transfer->rewritten_early.front();
  EXPECT_THROW(model.placeIn(torch::zeros({f.layout.total_floats})), Error);
}

}  // namespace
}  // namespace tandem::train
