#pragma once
// Collectives over raw buffers between the workers of a cluster, on Gloo's
// TCP transport: the Gloo inside LibTorch, through c10d's ProcessGroupGloo,
// so a process holds one Gloo (docs/architecture.md). The interface is
// torch-free (callers pass pointers and counts); the implementation links
// LibTorch.
//
// Errors: a peer that dies or stalls past the timeout makes the call throw
// PeerError naming the operation and, where Gloo tells, the peer; the
// communicator is then unusable (every later call throws too). Bad arguments
// (a root out of range) throw Error and leave it usable.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cluster/kv_store.hpp"
#include "core/wire_dtype.hpp"

namespace tandem::collective {

// What a user's tensor holds, for reductions beyond float32 sums.
// Values travel as int32 announcements: new types go at the end.
enum class ElementType { kUint8, kInt8, kInt32, kInt64, kFloat16, kBfloat16, kFloat32, kFloat64, kInt16 };
enum class Reduction { kSum, kProduct, kMin, kMax };
size_t elementBytes(ElementType type);

struct CommunicatorOptions {
  int rank = 0;
  int size = 1;
  std::string local_host = "127.0.0.1";  // address peers reach this process at
  std::chrono::milliseconds timeout{60000};  // per-operation peer timeout
};

// Not thread-safe: call from one thread (e.g. a CommThread). Every rank must
// issue the same collectives in the same order.
class Communicator {
 public:
  // Rendezvous through `store` (Gloo full mesh). Throws PeerError on timeout
  // and Error for a bad rank/size or an unusable local_host. size 1 touches
  // neither the store nor the network. For size > 1 it sets SIGPIPE to
  // ignored if it is still at its default, so a peer dying mid-send becomes a
  // PeerError rather than killing this process.
  // `store` must outlive the communicator.
  static std::unique_ptr<Communicator> connect(cluster::KeyValueStore& store, const CommunicatorOptions& options);
  // Unless the communicator is broken or being destroyed by an exception,
  // first waits (up to the timeout) until every rank has reached its own
  // destructor: closing sockets while a slower peer is still finishing the
  // last collective would fail that peer.
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place elementwise sum across all ranks (Gloo's ring all-reduce).
  virtual void allreduceSum(float* data, size_t count) = 0;
  // The same sum for a buffer used once (a user's tensor). With c10d's
  // Gloo nothing is cached per buffer, so it is allreduceSum.
  virtual void allreduceSumOnce(float* data, size_t count) = 0;
  // The sum of `count` 16-bit values (fp16 or bf16, core/wire_dtype.hpp),
  // each addition made in float32 and rounded back to 16 bits: half the
  // bytes of a float sum.
  virtual void allreduceSum16(void* data, size_t count, WireDtype dtype) = 0;
  // In-place elementwise `op` of `count` values of `type` across all ranks
  // (Gloo's own reduction for that type; 16-bit sums add in float32).
  virtual void allreduce(void* data, size_t count, ElementType type, Reduction op) = 0;
  // Copies root's `bytes` at `data` into every rank's `data`.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // out holds size() * bytes; rank r's `in` lands at out + r * bytes.
  virtual void allgather(const void* in, void* out, size_t bytes) = 0;
  // Personalised exchange: `in` holds send_bytes[r] bytes for each rank r in
  // rank order, and rank r's block for this rank lands in `out`, blocks in
  // rank order, recv_bytes[r] bytes each. One round of direct sends (no
  // relaying), so small blocks cost one latency. Both vectors have size()
  // entries; send_bytes[rank()] must equal recv_bytes[rank()]. Zero is fine.
  virtual void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                         const std::vector<size_t>& recv_bytes) = 0;
  virtual void barrier() = 0;
  // Closes without the goodbye wait of the destructor: a communicator this
  // one works beside failed, so peers may never come, and closing at once
  // fails the ones still waiting on this rank sooner. Refuses later calls.
  virtual void abandon() = 0;
};

}  // namespace tandem::collective
