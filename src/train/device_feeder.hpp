#pragma once
// Hands the training loop batches already on its device. Each batch's copy
// is issued one step ahead, so it runs while the GPU computes the step
// before; the compute stream, not the host, waits for it.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "data/dataset.hpp"

namespace tandem::train {

// How a host batch reaches the device: issue() starts the copy and returns
// a ticket; collect() makes later compute wait for it and gives the batch
// on the device. An interface so that the feeder's ordering is tested on
// CPU, and the CUDA one (streams and events) runs only where a GPU is.
class BatchCopier {
 public:
  struct Ticket {
    data::Batch batch;  // on the device once the copy is done
    std::shared_ptr<void> done;  // the copier's own completion marker
  };
  virtual ~BatchCopier() = default;
  virtual Ticket issue(const data::Batch& host) = 0;
  virtual data::Batch collect(Ticket ticket) = 0;
};

// Copies on a stream of its own from pinned memory (non-blocking), records
// an event there, and has the compute stream wait on it. Needs LibTorch's
// CUDA half loaded; uses only c10's device-generic streams and events
// (train/device_transfer.cpp, beside the other stream copies).
std::unique_ptr<BatchCopier> makeStreamCopier(const torch::Device& device);

class DeviceFeeder {
 public:
  // `source` yields the host batches, `count` of them in all; `copier`
  // null means the device is the CPU and batches pass through.
  DeviceFeeder(std::function<data::Batch()> source, int64_t count, std::unique_ptr<BatchCopier> copier);
  // The next batch, on the device; the one after it is already on its way.
  data::Batch next();

 private:
  std::function<data::Batch()> source_;
  int64_t remaining_;  // host batches not yet taken from source_
  std::unique_ptr<BatchCopier> copier_;
  std::optional<BatchCopier::Ticket> ahead_;
};

}  // namespace tandem::train
