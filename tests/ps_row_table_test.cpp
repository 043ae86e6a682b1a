// Embedding rows on the servers: which server holds a row, a batch's ids
// deduplicated with their gradients summed, rows made on first touch and
// the same on any layout of servers, and what a bad push or id gets.
#include "ps/row_table.hpp"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/error.hpp"

namespace tandem::ps {
namespace {

RowTableOptions options(int64_t rows = 1000, size_t dim = 4) {
  return {.name = "table 2 (C3)", .table = 2, .num_rows = rows, .dim = dim, .seed = 5, .init_scale = 0.1f,
          .optimizer = optim::sparseOptimizerDefaults("adagrad")};
}

TEST(RowSharding, SpreadsRowsEvenlyAndTablesDifferently) {
  std::map<int, int> count;
  int same_server = 0;
  for (int64_t id = 0; id < 40000; ++id) {
    const int server = serverOfRow(0, id, 4);
    ASSERT_GE(server, 0);
    ASSERT_LT(server, 4);
    ++count[server];
    same_server += serverOfRow(1, id, 4) == server;
  }
  for (const auto& [server, n] : count) EXPECT_NEAR(n, 10000, 400) << "server " << server;
  // Another table's row of the same id lands elsewhere about 3 times in 4.
  EXPECT_NEAR(same_server, 10000, 400);
  EXPECT_EQ(serverOfRow(3, 123456789, 7), serverOfRow(3, 123456789, 7));
}

TEST(UniqueRowsTest, EachIdOnceAscendingWithWhereEachWent) {
  const std::vector<int64_t> ids{7, 3, 7, 9, 3, 3};
  const UniqueRows rows = uniqueRows(ids);
  EXPECT_EQ(rows.ids, (std::vector<int64_t>{3, 7, 9}));
  EXPECT_EQ(rows.inverse, (std::vector<uint32_t>{1, 0, 1, 2, 0, 0}));
  const std::vector<float> grads{1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60};  // dim 2
  std::vector<float> summed(6);
  sumByRow(rows, grads, 2, summed);
  EXPECT_EQ(summed, (std::vector<float>{2 + 5 + 6, 20 + 50 + 60, 1 + 3, 10 + 30, 4, 40}));
  EXPECT_TRUE(uniqueRows({}).ids.empty());
}

TEST(RowTableTest, RowsAreMadeOnFirstTouchTheSameOnAnyLayout) {
  RowTable table(options());
  EXPECT_EQ(table.rows(), 0u);
  std::vector<float> out(2 * 4);
  const std::vector<int64_t> ids{999, 17};
  table.pull(ids, out);
  EXPECT_EQ(table.rows(), 2u);
  EXPECT_EQ(table.bytes(), 2u * 4 * 2 * sizeof(float));  // values and Adagrad's sum
  for (float v : out) {
    EXPECT_GE(v, -0.1f);
    EXPECT_LT(v, 0.1f);
  }
  // A row's first values depend on (seed, table, id) only.
  std::vector<float> again(4);
  initialRow(5, 2, 17, 0.1f, again);
  EXPECT_EQ(std::vector<float>(out.begin() + 4, out.end()), again);
  initialRow(5, 3, 17, 0.1f, again);
  EXPECT_NE(std::vector<float>(out.begin() + 4, out.end()), again);

  // Three servers, each holding its rows, step as one table does.
  RowTable whole(options());
  std::vector<RowTable> shards;
  for (int s = 0; s < 3; ++s) shards.emplace_back(options());
  const std::vector<int64_t> batch{4, 500, 61, 8};
  const std::vector<float> grads{.1f, .2f, .3f, .4f, 1, 2, 3, 4, -1, 0, 1, 0, 5, 5, 5, 5};
  for (int step = 0; step < 3; ++step) {
    whole.apply(batch, grads, 0.1);
    for (int s = 0; s < 3; ++s) {
      std::vector<int64_t> mine;
      std::vector<float> mine_grads;
      for (size_t k = 0; k < batch.size(); ++k) {
        if (serverOfRow(2, batch[k], 3) != s) continue;
        mine.push_back(batch[k]);
        mine_grads.insert(mine_grads.end(), grads.begin() + 4 * k, grads.begin() + 4 * (k + 1));
      }
      shards[static_cast<size_t>(s)].apply(mine, mine_grads, 0.1);
    }
  }
  for (int64_t id : batch) {
    std::vector<float> a(4), b(4);
    whole.pull(std::vector<int64_t>{id}, a);
    shards[static_cast<size_t>(serverOfRow(2, id, 3))].pull(std::vector<int64_t>{id}, b);
    EXPECT_EQ(a, b) << "row " << id;
  }
  EXPECT_EQ(whole.steps(), 3);
}

TEST(RowTableTest, AnIdOutOfRangeOrAShortPushIsNamed) {
  RowTable table(options(100));
  std::vector<float> out(4);
  try {
    table.pull(std::vector<int64_t>{100}, out);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "table 2 (C3): row id 100 is out of range (the table has 100 rows)");
  }
  EXPECT_THROW(table.pull(std::vector<int64_t>{-1}, out), InputError);
  try {
    table.apply(std::vector<int64_t>{1, 2}, std::vector<float>(7), 0.1);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "table 2 (C3): a push of 2 rows carries 7 floats, not 2 x 4");
  }
  EXPECT_EQ(table.steps(), 0);
  EXPECT_THROW(RowTable(options(100, 0)), InputError);
  EXPECT_THROW(RowTable(options(0, 4)), InputError);
  EXPECT_THROW(optim::sparseOptimizerDefaults("rmsprop"), InputError);
}

}  // namespace
}  // namespace tandem::ps
