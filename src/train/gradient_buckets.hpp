#pragma once
// All-reduce's gradient buckets over one GradientCapture. Parameters are
// packed in reverse registration order (the order backward produces their
// gradients) into buckets of at most `cap_bytes`, each a contiguous range of
// the capture's flat buffer. Each gradient is pre-scaled by
// 1/(workers x micro-steps) so the reduced sum is the mean; buckets are
// launched strictly in index order, so every worker issues its collectives
// in the same sequence whatever order its hooks fire in.
#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "train/gradient_capture.hpp"

namespace tandem::train {

// The bucket cap for `bucket_mb` MiB; 0 sizes buckets from the model by
// collective::autoBucketFloats: about 16 of 0.25-4 MiB.
size_t bucketCapBytes(torch::nn::Module& model, double bucket_mb);

class GradientBuckets {
 public:
  // launch(bucket index, flat buffer): called on the autograd thread; it must
  // only enqueue work, and that work must awaitOnHost(bucket) before it
  // reads the buffer (a GPU model's gradients are still being copied). `extra_tail` floats are appended to the last bucket
  // (the one launched last) for per-step metadata the caller fills through
  // tail() before it is launched (see before_last_launch).
  using LaunchFn = std::function<void(size_t bucket, torch::Tensor flat)>;

  // Registers hooks on every parameter that requires grad. Throws Error if a
  // parameter is not a dense float32 tensor. A GPU model's buckets are
  // staged through host memory, unless `on_device` (NCCL reads them there;
  // then `extra_tail` must be 0).
  GradientBuckets(torch::nn::Module& model, size_t cap_bytes, size_t extra_tail, LaunchFn launch,
                  std::function<void()> before_last_launch, bool on_device = false);

  size_t size() const { return bucket_count_; }
  void awaitOnHost(size_t bucket) const { capture_->awaitOnHost(bucket); }
  size_t bucketBytes(size_t bucket) const;
  // The metadata floats at the end of the last bucket.
  torch::Tensor tail() const { return tail_; }

  void beginMicroStep(int micro_step, bool last, double scale) { capture_->beginMicroStep(micro_step, last, scale); }
  // After the last backward: zero-fills slots of parameters that got no
  // gradient this update and launches every bucket not yet launched.
  void flush() { capture_->flush(); }
  // Points every parameter's .grad at its slot (no copy; a GPU model's
  // after copying the sums back). Call once every launched bucket has been
  // reduced.
  void exposeGradients() { capture_->exposeGradients(); }

 private:
  size_t bucket_count_ = 0;
  torch::Tensor tail_;
  std::unique_ptr<GradientCapture> capture_;
};

}  // namespace tandem::train
