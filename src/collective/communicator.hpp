#pragma once
// Collectives over raw buffers between the workers of a cluster, on Gloo's
// TCP transport. Torch-free: callers pass pointers and counts.
//
// Errors: a peer that dies or stalls past the timeout makes the call throw
// PeerError naming the operation and, where Gloo tells, the peer; the
// communicator is then unusable (every later call throws too). Bad arguments
// (a root out of range) throw Error and leave it usable.
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/wire_dtype.hpp"

namespace tandem::collective {

struct CommunicatorOptions {
  int rank = 0;
  int size = 1;
  std::string local_host = "127.0.0.1";  // address peers reach this process at
  std::chrono::milliseconds timeout{60000};  // per-operation peer timeout
  // Buffers at least this large use ring-chunked all-reduce; smaller ones
  // halving-doubling (fewer rounds, latency-bound sizes). Not lower: on
  // loopback, ring-chunked at 256 KiB (64 KiB chunks for 2 ranks) stalled
  // for 20-90 ms per call, while halving-doubling took 0.3 ms (docs/results.md).
  size_t ring_threshold_bytes = size_t{4} << 20;
};

enum class AllreduceAlgorithm { kHalvingDoubling, kRingChunked };

// The algorithm allreduceSum runs for `count` floats under `options`:
// ring-chunked from ring_threshold_bytes up (0: always), halving-doubling
// below (SIZE_MAX: always). Pure; the communicator decides with it.
AllreduceAlgorithm allreduceAlgorithmFor(size_t count, const CommunicatorOptions& options);
// The same by the buffer's bytes, whatever its element type.
AllreduceAlgorithm allreduceAlgorithmForBytes(size_t bytes, const CommunicatorOptions& options);

// Not thread-safe: call from one thread (e.g. a CommThread). Every rank must
// issue the same collectives in the same order.
class Communicator {
 public:
  // Rendezvous through `store` (Gloo full mesh). Throws PeerError on timeout
  // and Error for a bad rank/size or an unusable local_host. size 1 touches
  // neither the store nor the network. For size > 1 it sets SIGPIPE to
  // ignored if it is still at its default, so a peer dying mid-send becomes a
  // PeerError rather than killing this process.
  static std::unique_ptr<Communicator> connect(gloo::rendezvous::Store& store, const CommunicatorOptions& options);
  // Unless the communicator is broken or being destroyed by an exception,
  // first waits (up to the timeout) until every rank has reached its own
  // destructor: closing sockets while a slower peer is still finishing the
  // last collective would fail that peer.
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place elementwise sum across all ranks. Algorithm instances are cached
  // per (data, count), so repeated calls on a persistent buffer (a gradient
  // bucket) pay set-up once. Because a cache miss consumes Gloo slots that
  // must match across ranks, every rank must reuse buffers in the same
  // pattern: a (data, count) seen before on one rank must be one seen before
  // on all (persistent buffers, or fresh ones whose count is new, are fine).
  virtual void allreduceSum(float* data, size_t count) = 0;
  // The same sum for a buffer used once (a user's tensor): nothing is cached,
  // so any buffer is safe, at the price of setting the algorithm up each call.
  virtual void allreduceSumOnce(float* data, size_t count) = 0;
  // The sum of `count` 16-bit values (fp16 or bf16, core/wire_dtype.hpp),
  // each addition made in float32 and rounded back: half the bytes of a
  // float sum. Cached and chosen (by bytes) like allreduceSum, with the same
  // rule for reusing buffers.
  virtual void allreduceSum16(void* data, size_t count, WireDtype dtype) = 0;
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
};

}  // namespace tandem::collective
