// A server's embedding tables and a worker's copies of their rows: pulls
// that move only what changed, async pushes applied at once, sync pushes
// summed in worker order whatever their arrival, and declarations that
// disagree named.
#include "ps/embedding_store.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "ps/row_cache.hpp"

namespace tandem::ps {
namespace {

constexpr size_t kDim = 3;

RowTableOptions spec(uint32_t table = 1) {
  return {.name = "table 1 (C2)", .table = table, .num_rows = 100, .dim = kDim, .seed = 9, .init_scale = 0.2f,
          .optimizer = optim::sparseOptimizerDefaults("adam")};
}

std::vector<float> rowOf(const EmbeddingStore& store, int64_t id) {
  std::vector<float> out(kDim);
  const_cast<RowTable&>(store.table(1)).pull(std::vector<int64_t>{id}, out);
  return out;
}

TEST(EmbeddingStoreTest, ADeclarationThatDisagreesIsNamed) {
  EmbeddingStore store(false);
  store.declare(spec());
  store.declare(spec());  // the same again: nothing new
  RowTableOptions other = spec();
  other.dim = 4;
  try {
    store.declare(other);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "table 1 (C2): dimension 4 in this declaration, 3 on the server");
  }
  other = spec();
  other.optimizer = optim::sparseOptimizerDefaults("sgd");
  EXPECT_THROW(store.declare(other), InputError);
  EXPECT_THROW(store.pull(7, std::vector<int64_t>{1}, std::vector<uint32_t>{0}), InputError);
}

TEST(EmbeddingStoreTest, APullMovesOnlyTheRowsThatChanged) {
  EmbeddingStore store(false);
  store.declare(spec());
  const std::vector<int64_t> ids{5, 8, 13};
  RowCache cache({{1, kDim}});
  RowPullReply first = store.pull(1, ids, cache.held(1, ids));
  EXPECT_EQ(first.positions, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(first.versions, (std::vector<uint32_t>{1, 1, 1}));
  cache.update(1, ids, first);
  // Nothing changed: nothing moves.
  EXPECT_TRUE(store.pull(1, ids, cache.held(1, ids)).positions.empty());
  // Another worker's push (async: applied at once) changes row 8.
  store.push(3, 1, std::vector<int64_t>{8}, std::vector<float>{1, 1, 1}, 0.1);
  const RowPullReply second = store.pull(1, ids, cache.held(1, ids));
  EXPECT_EQ(second.positions, (std::vector<uint32_t>{1}));
  EXPECT_EQ(second.versions, (std::vector<uint32_t>{2}));
  cache.update(1, ids, second);
  std::vector<float> gathered(ids.size() * kDim);
  cache.gather(1, ids, gathered);
  EXPECT_EQ(std::vector<float>(gathered.begin() + kDim, gathered.begin() + 2 * kDim), rowOf(store, 8));
  EXPECT_EQ(cache.rows(), 3u);
  cache.retainOnly(1, std::vector<int64_t>{13});
  EXPECT_EQ(cache.rows(), 1u);
  EXPECT_EQ(cache.bytes(), kDim * sizeof(float));
  try {
    cache.gather(1, std::vector<int64_t>{5}, std::span<float>(gathered).first(kDim));
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "row cache: row 5 of table 1 was never pulled");
  }
}

TEST(EmbeddingStoreTest, SyncSumsTheStepsPushesInWorkerOrderAndAppliesThemOnce) {
  // Three workers' gradients of row 4 whose float sum depends on the order:
  // (1 + 1e-8) - 1 is 0, (-1 + 1) + 1e-8 is not.
  const std::vector<std::vector<float>> grads{{1.0f, 0, 0}, {1e-8f, 0, 0}, {-1.0f, 0, 0}};
  auto run = [&](const std::vector<int>& arrival) {
    EmbeddingStore store(true);
    store.declare(spec());
    const std::vector<float> before = rowOf(store, 4);
    for (int worker : arrival) store.push(worker, 1, std::vector<int64_t>{4}, grads[worker], 0.01);
    EXPECT_EQ(rowOf(store, 4), before);  // nothing moves before the step ends
    store.endStep(0.01);
    EXPECT_EQ(store.table(1).steps(), 1);
    return rowOf(store, 4);
  };
  const std::vector<float> in_order = run({0, 1, 2});
  EXPECT_EQ(run({2, 0, 1}), in_order);
  EXPECT_EQ(run({1, 2, 0}), in_order);
  // The sum was (1 + 1e-8) - 1 = 0 in the first value: lazy Adam's first
  // step moves a row by lr * g / (|g| + eps), so that value stayed put.
  EmbeddingStore fresh(true);
  fresh.declare(spec());
  EXPECT_EQ(in_order[0], rowOf(fresh, 4)[0]);
  EmbeddingStore store(true);
  store.declare(spec());
  store.push(0, 1, std::vector<int64_t>{4}, grads[0], 0.01);
  EXPECT_THROW(store.push(0, 1, std::vector<int64_t>{4}, grads[0], 0.01), InputError);  // twice in a step
  EXPECT_THROW(store.push(1, 1, std::vector<int64_t>{100}, std::vector<float>(kDim), 0.01), InputError);
}

TEST(EmbeddingStoreTest, OneSyncWorkerStepsTheTableAsStandaloneDoes) {
  EmbeddingStore store(true);
  store.declare(spec());
  RowTable standalone(spec());
  const std::vector<int64_t> ids{1, 50, 99};
  const std::vector<float> grads{0.5f, -0.25f, 0.125f, 1, 2, 3, -1, -2, -3};
  for (int step = 0; step < 5; ++step) {
    store.push(0, 1, ids, grads, 0.05);
    store.endStep(0.05);
    standalone.apply(ids, grads, 0.05);
  }
  for (int64_t id : ids) {
    std::vector<float> expected(kDim);
    standalone.pull(std::vector<int64_t>{id}, expected);
    EXPECT_EQ(rowOf(store, id), expected) << "row " << id;
  }
}

TEST(EmbeddingStoreTest, APrefetchedBatchRePullsWhatTheStepInBetweenUpdated) {
  EmbeddingStore store(true);
  store.declare(spec());
  RowCache cache({{1, kDim}});
  const std::vector<int64_t> step1{3, 4, 5}, step2{4, 5, 6, 7};
  cache.update(1, step1, store.pull(1, step1, cache.held(1, step1)));
  // Step 2's rows are prefetched while step 1 runs.
  cache.update(1, step2, store.pull(1, step2, cache.held(1, step2)));
  store.push(0, 1, step1, std::vector<float>(step1.size() * kDim, 0.5f), 0.1);
  store.endStep(0.1);
  // After step 1, only the rows both steps share come again.
  const RowPullReply again = store.pull(1, step2, cache.held(1, step2));
  EXPECT_EQ(again.positions, (std::vector<uint32_t>{0, 1}));  // rows 4 and 5
  cache.update(1, step2, again);
  cache.retainOnly(1, step2);
  std::vector<float> rows(step2.size() * kDim);
  cache.gather(1, step2, rows);
  for (size_t k = 0; k < step2.size(); ++k) {
    EXPECT_EQ(std::vector<float>(rows.begin() + k * kDim, rows.begin() + (k + 1) * kDim), rowOf(store, step2[k]));
  }
}

}  // namespace
}  // namespace tandem::ps
