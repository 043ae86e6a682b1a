#pragma once
// How values cross between a device and host memory in distributed modes:
// gradients go to the host to be summed or pushed, and sums or pulled
// parameters come back. Copies run on a copy stream of their own; neither
// the host nor the compute stream waits for a copy before it needs it.
// An interface so that the users' ordering (wait before reading a copy's
// host values) is tested on the CPU with a copier that holds values back
// until waited for; the CUDA one (streams and events) runs only on a GPU.
#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace tandem::train {

class DeviceTransfer {
 public:
  // A copy's completion; null means done.
  using Marker = std::shared_ptr<void>;
  virtual ~DeviceTransfer() = default;
  // `floats` float32 values of host memory the copies below may read and
  // write while the host goes on (page-locked where that matters).
  virtual torch::Tensor hostBuffer(int64_t floats) = 0;
  // Copies `device` into `host` after the work the calling thread's current
  // stream has queued so far (which produced the values). Returns at once;
  // `host` holds the values after wait(marker). Thread-safe.
  virtual Marker toHost(const torch::Tensor& device, const torch::Tensor& host) = 0;
  // Copies `host` into `device` after the work queued so far on the calling
  // thread's current stream (which may still read `device`); work queued
  // there later waits for the copy. Returns at once; `host` must not be
  // rewritten before wait(marker). Thread-safe.
  virtual Marker toDevice(const torch::Tensor& host, const torch::Tensor& device) = 0;
  // Blocks the calling thread until the copy is done.
  virtual void wait(const Marker& done) = 0;
};

// The CUDA copier: a stream from LibTorch's pool, events, page-locked host
// buffers. Needs LibTorch's CUDA half loaded; uses only c10's
// device-generic streams and events.
std::unique_ptr<DeviceTransfer> makeStreamTransfer(const torch::Device& device);

// What stages buffers of `device` through host memory: null for the CPU
// (nothing to stage), else the CUDA copier.
std::shared_ptr<DeviceTransfer> hostStagingFor(const torch::Device& device);

}  // namespace tandem::train
