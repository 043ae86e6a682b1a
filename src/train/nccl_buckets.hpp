#pragma once
// All-reduce of GPU workers' gradient buckets with NCCL, in device memory.
// Each bucket's sum is queued on a stream of its own (NCCL's) after an
// event on the stream that produced the bucket's gradients, so it overlaps
// the rest of backward; the compute stream waits for the sums' event before
// the optimizer reads them. No host copy: only waiting for completion (with
// a deadline, aborting NCCL on a dead peer) touches the host.
//
// Threads: produced() on autograd's thread; join, reduce and awaitAll on
// one communication thread; computeWaits on the training thread.
#include <torch/torch.h>

#include <memory>
#include <string>

#include "collective/nccl_communicator.hpp"
#include "core/wire_dtype.hpp"

namespace tandem::train {

class NcclBuckets {
 public:
  // A bucket's gradients as produced so far on the calling thread's stream.
  using Produced = std::shared_ptr<void>;

  // Joins the job's NCCL communicator with `id`, on `device`; 16-bit wires
  // sum in that format (each bucket cast on NCCL's stream and back).
  NcclBuckets(const torch::Device& device, const collective::NcclId& id, const collective::NcclOptions& options,
              WireDtype wire);
  ~NcclBuckets();

  Produced produced() const;
  // Queues bucket `flat`'s (device float32) in-place sum after `produced`.
  void reduce(const torch::Tensor& flat, const Produced& produced);
  // Blocks until every queued sum is done; PeerError (NCCL aborted) if a
  // peer fails or the timeout passes first.
  void awaitAll(const std::string& what);
  // Later work on the calling thread's current stream waits for the sums.
  void computeWaits() const;
  double setupSeconds() const { return comm_->setupSeconds(); }

 private:
  struct Streams;
  torch::Device device_;
  WireDtype wire_;
  std::unique_ptr<Streams> streams_;
  std::unique_ptr<collective::NcclCommunicator> comm_;
};

}  // namespace tandem::train
