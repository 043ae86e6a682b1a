#pragma once
// Before each of the public API's collectives, every rank announces what it
// is about to do (a small fixed record, allgathered), so that mismatched
// calls fail with an error naming the ranks instead of pairing unrelated
// buffers, and so that ranks that have called join() can serve the others'
// reductions with zeros (Horovod's join). The decision is pure: agree()
// takes every rank's announcement and says what happens next. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::api {

enum class CallKind : int32_t {
  kAllreduce = 1,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kBarrier,
  kGradients,  // one step of a GradientAverager's buckets
  kJoin,
  kProcessSets,  // add_process_set (op 0, count: ranks) or remove_process_set (op 1, count: id)
};

// Trivially copyable: it travels as bytes.
struct Announcement {
  CallKind kind = CallKind::kBarrier;
  int32_t dtype = 0;     // collective::ElementType
  int32_t op = 0;        // collective::Reduction
  int32_t root = 0;      // broadcast
  int64_t count = 0;     // allreduce: elements; allgather, alltoall: first dimension
  uint64_t signature = 0;  // hash of all that must match across ranks (not the first dimension)
  int32_t invalid = 0;     // the caller refused its own arguments; it throws its own error
  int32_t first_join = 0;  // join: this rank's first announcement since it joined
};

struct Agreement {
  bool all_joined = false;
  int last_joined = -1;    // all_joined: the highest rank among those that joined last
  std::vector<int> joined; // ranks in join()
  Announcement call;       // what the ranks not in join() run (unless all_joined)
  std::vector<int64_t> counts;  // every rank's count (allgather's rows)
  std::string error;       // non-empty: every rank throws it (InputError)
};

// What every rank does after seeing `all` (indexed by rank). Every rank
// computes the same answer from the same announcements.
Agreement agree(const std::vector<Announcement>& all);

// "allreduce (sum) of 12 float32 values", for errors.
std::string describe(const Announcement& call);

}  // namespace tandem::api
