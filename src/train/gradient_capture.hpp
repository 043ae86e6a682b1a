#pragma once
// The one place gradients leave autograd in distributed modes. Hooks on the
// trainable parameters copy each gradient, pre-scaled, into its slot of one
// persistent flat buffer (summing over the micro-steps of an update), and
// hand over each group of slots (an all-reduce bucket, a PS chunk) as soon
// as every parameter overlapping it has delivered on the last micro-step.
// The buffer lives as long as the capture: no step allocates its gradients'
// storage anew, and a zero-copy send can read straight from it.
//
// The buffer lives with the parameters (a GPU's, for NCCL), unless a
// DeviceTransfer stages it: then the slots are a flat buffer on the device,
// and each group is copied into the host buffer as it is handed over (a
// copy stream, page-locked memory); whoever reads a group waits for its
// copy first (awaitOnHost). exposeGradients copies the host buffer back.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "train/device_transfer.hpp"

namespace tandem::train {

class GradientCapture {
 public:
  struct Range {
    int64_t begin = 0;
    int64_t length = 0;
  };
  // ready(group): called on the autograd thread; it must only enqueue work.
  using ReadyFn = std::function<void(size_t group)>;

  // `offsets[p]` is where parameter p's gradient starts in a buffer of
  // `total` floats; `groups` are ranges of that buffer handed over together.
  // With `in_order`, groups are handed over strictly in index order (every
  // all-reduce worker must issue its collectives in one sequence); without,
  // each as soon as it is complete. Throws Error if a parameter is not a
  // dense float32 tensor or lies outside the buffer, InputError if the
  // parameters are on more than one device. `buffer`, when given, is that
  // buffer (float32, `total` contiguous values where groups are read, e.g.
  // in memory shared with a server); otherwise the capture allocates it.
  // `transfer` stages the gradients through host memory; null: none.
  GradientCapture(std::vector<torch::Tensor> params, const std::vector<int64_t>& offsets, int64_t total,
                  const std::vector<Range>& groups, bool in_order, ReadyFn ready, torch::Tensor buffer = {},
                  std::shared_ptr<DeviceTransfer> transfer = nullptr);
  ~GradientCapture();
  GradientCapture(const GradientCapture&) = delete;
  GradientCapture& operator=(const GradientCapture&) = delete;

  torch::Tensor flat() const;               // where groups are read
  torch::Tensor group(size_t index) const;  // a view of flat()
  // Blocks until group `index`'s host values are in (a staged copy); at
  // once when the gradients are written there directly. Call it, on any
  // thread, after the group was handed over and before reading it.
  void awaitOnHost(size_t index) const;
  bool staged() const;  // gradients cross from a device

  // Starts a micro-batch: `scale` multiplies each gradient; `last` marks the
  // micro-step whose hooks hand groups over. Not thread-safe with backward.
  void beginMicroStep(int micro_step, bool last, double scale);
  // After the last backward: zero-fills the slots of parameters that got no
  // gradient this update and hands over every group not yet handed over.
  void flush();
  // Gradients that do not come from autograd (DiLoCo's outer gradient):
  // stops listening to backward, after which offer() is the only way in.
  void detachFromAutograd();
  // Takes `grad` as parameter `index`'s gradient for this micro-step, as a
  // backward hook would. Not thread-safe with backward.
  void offer(size_t index, const torch::Tensor& grad);
  // Points every parameter's .grad at its slot (no copy); staged, first
  // copies the host buffer's values back into the slots.
  void exposeGradients();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

}  // namespace tandem::train
