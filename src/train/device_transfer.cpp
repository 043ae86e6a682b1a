#include "train/device_transfer.hpp"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace tandem::train {
namespace {

class StreamTransfer final : public DeviceTransfer {
 public:
  explicit StreamTransfer(const torch::Device& device)
      : device_(device), impl_(device.type()), copy_stream_(impl_.getStreamFromGlobalPool(device)) {}

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
    const c10::Stream current = impl_.getStream(device_);
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

  torch::Device device_;
  c10::impl::VirtualGuardImpl impl_;
  c10::Stream copy_stream_;
};

}  // namespace

std::unique_ptr<DeviceTransfer> makeStreamTransfer(const torch::Device& device) {
  return std::make_unique<StreamTransfer>(device);
}

}  // namespace tandem::train
