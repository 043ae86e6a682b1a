#pragma once
// A server's embedding tables (issue 54): the handler's pure part for
// sparse rows, before any frame. Workers declare the tables; pull the rows
// a batch needs, sending the versions they hold so that only rows that
// changed come back (a prefetched batch re-pulls just what the step in
// between updated); and push row gradients. Async applies each push as one
// step of its table; sync adds the workers' pushes of a step up, in worker
// order whatever order they came in, and applies the sum once at the
// step's end. Not thread-safe: the server's apply order owns it.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "ps/row_table.hpp"

namespace tandem::ps {

struct RowPullReply {
  std::vector<uint32_t> positions;  // of the asked ids whose row the worker lacked or held at another version
  std::vector<uint32_t> versions;   // theirs now
  std::vector<float> values;        // positions.size() x dim
};

class EmbeddingStore {
 public:
  explicit EmbeddingStore(bool sync) : sync_(sync) {}

  // A table, as a worker (or a checkpoint) describes it; the same again is
  // nothing new. Throws InputError naming the table and what differs.
  void declare(const RowTableOptions& spec);

  // `held[k]`: the version of row ids[k] the worker holds (0: none).
  // Throws InputError for an undeclared table or an id out of range.
  RowPullReply pull(uint32_t table, std::span<const int64_t> ids, std::span<const uint32_t> held);

  // Worker `worker`'s gradient rows (ids distinct): async applies them now
  // at `lr`; sync keeps them for endStep.
  void push(int worker, uint32_t table, std::span<const int64_t> ids, std::span<const float> grads, double lr);

  // Sync: one step of every table some worker pushed to this step, of the
  // rows summed over the workers in worker order, at `lr`.
  void endStep(double lr);

  const RowTable& table(uint32_t id) const;
  size_t bytes() const;  // every table's rows and slots

 private:
  RowTable& find(uint32_t table);

  struct Pushed {
    std::vector<int64_t> ids;
    std::vector<float> grads;
  };
  bool sync_;
  std::map<uint32_t, std::unique_ptr<RowTable>> tables_;
  std::map<uint32_t, std::map<int, Pushed>> pending_;  // sync: table -> worker -> this step's push
};

}  // namespace tandem::ps
