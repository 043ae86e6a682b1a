#pragma once
// Embedding tables on the parameter servers: the rows of one table that one
// server holds, made when first touched, so a table can be far larger than
// any worker and only its used rows cost memory; and the pure pieces around
// it: which server holds a row (a hash of the table and row id, spreading
// popular ids), and a batch's ids deduplicated with their gradients summed.
// Torch-free.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "optim/sparse_kernels.hpp"

namespace tandem::ps {

// The server of row `id` of table `table`, of `servers`. Thread-safe (pure).
int serverOfRow(uint32_t table, int64_t id, int servers);

// A batch's row ids, each once, ascending; `inverse[k]` is where the k-th
// id of the batch went. Pulls move each row once however often the batch
// names it; pushes carry each row's summed gradient.
struct UniqueRows {
  std::vector<int64_t> ids;
  std::vector<uint32_t> inverse;
};
UniqueRows uniqueRows(std::span<const int64_t> ids);

// Sums the batch's gradient rows (`grads`: one `dim`-float row per id of
// the batch) into one row per unique id (`out`: ids.size() x dim), in the
// batch's order, as torch's coalesce() adds duplicates.
void sumByRow(const UniqueRows& rows, std::span<const float> grads, size_t dim, std::span<float> out);

// A row's first values: uniform in [-scale, scale), from (seed, table, id)
// alone, so a row starts the same on any number of servers and in the
// standalone table.
void initialRow(uint64_t seed, uint32_t table, int64_t id, float scale, std::span<float> out);

struct RowTableOptions {
  std::string name;         // how errors name it: "table 3 (C4)"
  uint32_t table = 0;
  int64_t num_rows = 0;     // ids are 0 .. num_rows - 1
  size_t dim = 0;
  uint64_t seed = 0;
  float init_scale = 0;     // initialRow's
  optim::SparseOptimizerSettings optimizer;
};

// Not thread-safe: one table shard is applied by one thread at a time (its
// server's apply order), as a dense chunk is.
class RowTable {
 public:
  // Throws InputError for a dimension of 0 or a table of no rows.
  explicit RowTable(RowTableOptions options);

  // Copies rows `ids` into `out` (ids.size() x dim), making any new one,
  // and their versions into `versions` when given (ids.size() of them).
  // Throws InputError naming the table and the id for one out of range.
  void pull(std::span<const int64_t> ids, std::span<float> out, std::span<uint32_t> versions = {});
  // A row's version: 1 + the steps that updated it (made rows start at 1;
  // 0 means "not made yet"), so a worker can tell whether the row it holds
  // is the server's.
  uint32_t version(int64_t id) const;
  // One step of the table at rate `lr`: row ids[k] (distinct) gets
  // gradient row k of `grads`. Rows not named keep their values and slots.
  void apply(std::span<const int64_t> ids, std::span<const float> grads, double lr);
  // What apply checks first: every id in range, a gradient row for each.
  // Throws InputError naming the table and the fault.
  void checkPush(std::span<const int64_t> ids, std::span<const float> grads) const;

  const RowTableOptions& options() const { return options_; }
  int64_t steps() const { return steps_; }     // applied so far
  size_t rows() const { return index_.size(); }  // made so far
  size_t bytes() const;                          // the rows' values and slots

 private:
  uint32_t slot(int64_t id);  // where row `id` lives, made on first use
  float* block(uint32_t slot);
  void requireInRange(int64_t id) const;

  RowTableOptions options_;
  size_t block_floats_;  // dim x (1 + slots)
  int64_t steps_ = 0;
  std::unordered_map<int64_t, uint32_t> index_;  // id -> its slot in the pages
  std::vector<uint32_t> versions_;                // by slot
  // Fixed pages, so a growing table never moves the rows it holds.
  std::vector<std::unique_ptr<float[]>> pages_;
};

}  // namespace tandem::ps
