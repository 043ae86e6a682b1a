#pragma once
// A parameter-server worker's pushes, from backward to the wire, off the
// training thread: each gradient is captured into one flat buffer in key
// order (GradientCapture); a chunk whose gradients are all in is waited
// for on the host when it came from a GPU (a staging thread), summed with
// the host-mates' first when the host sums (PsHostGroup), and pushed by
// ps::Worker. Owns the capture and the staging thread; the worker, the
// chunked model and the host group are the caller's, and outlive it.
#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "collective/comm_thread.hpp"
#include "core/deadline.hpp"
#include "train/chunked_parameters.hpp"
#include "train/gradient_capture.hpp"

namespace tandem::ps {
class Worker;
}  // namespace tandem::ps

namespace tandem::train {
class PsHostGroup;

class PsPushPipeline {
 public:
  // `shared_grads`: where same-host servers read pushes (the worker's
  // shared memory; undefined: the capture's own buffer). `from_autograd`
  // false: gradients are offered (DiLoCo's outer gradients), never taken
  // from backward.
  PsPushPipeline(ps::Worker& worker, ChunkedParameters& model, PsHostGroup* host, torch::Tensor shared_grads,
                 bool from_autograd);
  // Stops the staging thread (its queued jobs use the capture) before the capture.
  ~PsPushPipeline();
  PsPushPipeline(const PsPushPipeline&) = delete;
  PsPushPipeline& operator=(const PsPushPipeline&) = delete;

  // Before each micro-batch's backward: its gradients belong to `step`,
  // and on the `last` micro-step they go out, each scaled by `scale`.
  void beginMicroStep(int64_t step, int micro_step, bool last, double scale);
  // `gradients` (one per trainable parameter, registration order) take
  // the place of `step`'s, scaled by `scale`.
  void offer(int64_t step, const std::vector<torch::Tensor>& gradients, double scale);
  // After the update's last backward: pushes what backward left (zeros for
  // parameters without a gradient) and waits until every chunk this worker
  // pushes is handed to the worker (staged, summed). Throws PeerError
  // naming what did not finish by `deadline`.
  void drain(Deadline deadline);

 private:
  void groupReady(size_t group, size_t chunk);
  void chunkReady(size_t chunk);
  void push(size_t chunk);

  ps::Worker& worker_;
  ChunkedParameters& model_;
  PsHostGroup* host_;
  // Set by the training thread before a step's gradients arrive; read by
  // the threads that push them.
  std::atomic<int64_t> step_{0};
  std::unique_ptr<collective::CommThread> stager_;  // a GPU model: waits for each chunk's copy to the host
  collective::CommHandle staged_;                   // the last chunk handed to the stager
  std::unique_ptr<GradientCapture> capture_;        // groups are the chunks
};

}  // namespace tandem::train
