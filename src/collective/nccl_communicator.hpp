#pragma once
// NCCL for GPU buffers: one communicator per job, its unique id passed from
// rank 0 through the job's authenticated coordinator store. NCCL is loaded
// at run time (the libnccl.so.2 LibTorch's CUDA half brought in), so no
// build or CPU-only process depends on it; the few declarations used are
// Tandem's own, against NCCL's stable C ABI (2.14 and later).
//
// Every wait has a deadline: the communicator is made in NCCL's
// non-blocking mode and polled, and a collective's completion is polled
// with the caller's test while NCCL's asynchronous error is checked. On an
// error or a deadline the communicator is aborted (no kernel is left
// spinning on a dead peer) and PeerError names what was awaited; it is
// then unusable. Not thread-safe: one thread (a CommThread) at a time.
#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "cluster/kv_store.hpp"
#include "core/deadline.hpp"
#include "core/wire_dtype.hpp"

namespace tandem::collective {

using NcclId = std::array<char, 128>;

// Whether NCCL is usable in this process, and its version ("2.30.7") or
// why not. `library`: a libnccl.so.2 to load (tests); empty: the one
// already loaded, else the loader's search path. The first call decides.
struct NcclStatus {
  bool loaded = false;
  std::string detail;  // the version, or why not
};
const NcclStatus& ncclStatus(const std::string& library = "");

// A fresh unique id from NCCL (rank 0's). Throws Error if NCCL is not loaded.
NcclId makeNcclId();

// Rank 0 publishes `make()`'s id under `key`; the others wait for it until
// `deadline` (PeerError naming the key and rank 0 otherwise).
NcclId exchangeNcclId(cluster::KeyValueStore& store, const std::string& key, int rank,
                      const std::function<NcclId()>& make, Deadline deadline);

struct NcclOptions {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{60000};  // joining, and each collective
  std::string job = "this job";              // named in errors
};

class NcclCommunicator {
 public:
  // Joins the job's communicator with `id`; the calling thread's current
  // CUDA device is this rank's. Polls NCCL's non-blocking set-up until it
  // is done; PeerError (after aborting) if it fails or takes past the
  // timeout, which means some rank never joined.
  static std::unique_ptr<NcclCommunicator> connect(const NcclId& id, const NcclOptions& options);
  ~NcclCommunicator();  // frees it; aborts if broken or mid-collective
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  double setupSeconds() const { return setup_seconds_; }

  // Queues an in-place sum of `count` values at device address `data` on
  // `stream` (a cudaStream_t) and returns. Float32, or 16-bit on `wire`.
  void allreduceSum(void* data, size_t count, WireDtype wire, void* stream);
  // Blocks until `done()` (the caller's test of the queued work, e.g. an
  // event's query) says true. Throws PeerError naming `what`, after
  // aborting, if NCCL reports an error or the timeout passes first.
  void await(const std::function<bool()>& done, const std::string& what);

 private:
  struct Handle;
  NcclCommunicator(std::unique_ptr<Handle> handle, NcclOptions options);
  // Throws PeerError (after aborting) if NCCL reports an asynchronous error.
  void checkAsyncError(const std::string& what);
  [[noreturn]] void fail(const std::string& why);

  std::unique_ptr<Handle> handle_;
  NcclOptions options_;
  double setup_seconds_ = 0;
  bool broken_ = false;
};

}  // namespace tandem::collective
