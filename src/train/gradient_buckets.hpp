#pragma once
// Flat gradient buckets fed by autograd hooks. Parameters are packed in
// reverse registration order (the order backward produces their gradients)
// into buckets of at most `cap_bytes`. Each hook copies its gradient,
// pre-scaled by 1/(workers x micro-steps) so the reduced sum is the mean,
// into the parameter's slot; when the last slot of a bucket is written on
// the final micro-step, the bucket is handed to `launch`. Buckets are
// launched strictly in index order, so every worker issues its collectives
// in the same sequence whatever order its hooks fire in.
#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace tandem::train {

class GradientBuckets {
 public:
  // launch(bucket index, flat buffer): called on the autograd thread; it must
  // only enqueue work. `extra_tail` floats are appended to the last bucket
  // (the one launched last) for per-step metadata the caller fills through
  // tail() before it is launched (see onBeforeLastLaunch).
  using LaunchFn = std::function<void(size_t bucket, torch::Tensor flat)>;

  // Registers hooks on every parameter that requires grad. Throws Error if a
  // parameter is not a dense float32 tensor.
  GradientBuckets(torch::nn::Module& model, size_t cap_bytes, size_t extra_tail, LaunchFn launch,
                  std::function<void()> before_last_launch);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  size_t size() const;
  size_t bucketBytes(size_t bucket) const;
  // The metadata floats at the end of the last bucket.
  torch::Tensor tail() const;

  // Starts a micro-batch: `scale` multiplies each gradient; `last` marks the
  // micro-step whose hooks launch buckets. Not thread-safe with backward.
  void beginMicroStep(int micro_step, bool last, double scale);
  // After the last backward: zero-fills slots of parameters that got no
  // gradient this update and launches every bucket not yet launched.
  void flush();
  // Points every parameter's .grad at its slot (no copy). Call once every
  // launched bucket has been reduced.
  void exposeGradients();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

}  // namespace tandem::train
