#include "train/device_transfer.hpp"

#include "train/device_feeder.hpp"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace tandem::train {
namespace {

// A device and a copy stream of its own from LibTorch's pool.
class OnCopyStream {
 protected:
  explicit OnCopyStream(const torch::Device& device)
      : device_(device), impl_(device.type()), copy_stream_(impl_.getStreamFromGlobalPool(device)) {}
  c10::Stream compute() const { return impl_.getStream(device_); }  // the calling thread's current stream

  torch::Device device_;
  c10::impl::VirtualGuardImpl impl_;
  c10::Stream copy_stream_;
};

class StreamTransfer final : public DeviceTransfer, OnCopyStream {
 public:
  explicit StreamTransfer(const torch::Device& device) : OnCopyStream(device) {}

  torch::Tensor hostBuffer(int64_t floats) override {
    return torch::empty({floats}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
  }

  Marker toHost(const torch::Tensor& device, const torch::Tensor& host) override {
    return copyAfterCurrent(device, host, /*current_waits=*/false);
  }

  Marker toDevice(const torch::Tensor& host, const torch::Tensor& device) override {
    return copyAfterCurrent(host, device, /*current_waits=*/true);
  }

  void wait(const Marker& done) override {
    if (done) static_cast<c10::Event*>(done.get())->synchronize();
  }

 private:
  // The copy waits for the current stream's work so far; with
  // `current_waits`, the current stream's later work waits for the copy.
  Marker copyAfterCurrent(const torch::Tensor& from, const torch::Tensor& to, bool current_waits) {
    const c10::Stream current = compute();
    c10::Event before(device_.type());
    before.record(current);
    before.block(copy_stream_);
    {
      c10::StreamGuard on_copy_stream(copy_stream_);
      to.copy_(from, /*non_blocking=*/true);
    }
    auto done = std::make_shared<c10::Event>(device_.type());
    done->record(copy_stream_);
    if (current_waits) done->block(current);
    return done;
  }
};

// Batches: allocated on the device as they are copied, so the caching
// allocator must learn that the compute stream uses them too.
class StreamCopier final : public BatchCopier, OnCopyStream {
 public:
  explicit StreamCopier(const torch::Device& device) : OnCopyStream(device) {}

  Ticket issue(const data::Batch& host) override {
    c10::StreamGuard on_copy_stream(copy_stream_);
    // Allocated while the copy stream is current: the caching allocator ties
    // the memory to it until collect() records its use on the compute stream.
    data::Batch on_device{host.inputs.to(device_, /*non_blocking=*/true),
                          host.targets.to(device_, /*non_blocking=*/true)};
    auto done = std::make_shared<c10::Event>(device_.type());
    done->record(copy_stream_);
    return {std::move(on_device), std::move(done)};
  }

  data::Batch collect(Ticket ticket) override {
    const c10::Stream stream = compute();
    static_cast<c10::Event*>(ticket.done.get())->block(stream);
    for (const auto* t : {&ticket.batch.inputs, &ticket.batch.targets}) {
      impl_.recordDataPtrOnStream(t->storage().data_ptr(), stream);
    }
    return std::move(ticket.batch);
  }
};

}  // namespace

std::unique_ptr<DeviceTransfer> makeStreamTransfer(const torch::Device& device) {
  return std::make_unique<StreamTransfer>(device);
}

std::unique_ptr<BatchCopier> makeStreamCopier(const torch::Device& device) {
  return std::make_unique<StreamCopier>(device);
}

std::shared_ptr<DeviceTransfer> hostStagingFor(const torch::Device& device) {
  if (device.is_cpu()) return nullptr;
  return makeStreamTransfer(device);
}

}  // namespace tandem::train
