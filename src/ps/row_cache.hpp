#pragma once
// A worker's copies of embedding rows (issue 54): what it pulled, with the
// versions the servers gave, so its next pull names the versions it holds
// and gets back only the rows that changed. It keeps only the rows of the
// batches in flight (the current one and the one prefetched), so a worker
// never holds a table. Pure; not thread-safe.
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "ps/embedding_store.hpp"

namespace tandem::ps {

class RowCache {
 public:
  // `dims`: each table's row length, by table id.
  explicit RowCache(std::map<uint32_t, size_t> dims) : dims_(std::move(dims)) {}

  // The versions held of rows `ids` of `table` (0: none), for the pull.
  std::vector<uint32_t> held(uint32_t table, std::span<const int64_t> ids) const;
  // Takes in a pull's reply for the same `ids`.
  void update(uint32_t table, std::span<const int64_t> ids, const RowPullReply& reply);
  // Copies rows `ids` (all held) into `out` (ids.size() x dim). Throws
  // Error naming a row that was never pulled.
  void gather(uint32_t table, std::span<const int64_t> ids, std::span<float> out) const;
  // Drops every row of `table` but `ids`.
  void retainOnly(uint32_t table, std::span<const int64_t> ids);

  size_t rows() const;
  size_t bytes() const;

 private:
  struct Row {
    uint32_t version = 0;
    std::vector<float> values;
  };
  size_t dim(uint32_t table) const;

  std::map<uint32_t, size_t> dims_;
  std::map<uint32_t, std::unordered_map<int64_t, Row>> tables_;
};

}  // namespace tandem::ps
