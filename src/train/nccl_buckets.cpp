#include "train/nccl_buckets.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace tandem::train {

struct NcclBuckets::Streams {
  explicit Streams(const torch::Device& device)
      : impl(device.type()), nccl(impl.getStreamFromGlobalPool(device, /*isHighPriority=*/true)), last(device.type()) {}
  c10::impl::VirtualGuardImpl impl;
  c10::Stream nccl;
  c10::Event last;  // recorded after the last queued sum
  bool queued = false;
};

NcclBuckets::NcclBuckets(const torch::Device& device, const collective::NcclId& id,
                         const collective::NcclOptions& options, WireDtype wire)
    : device_(device), wire_(wire), streams_(std::make_unique<Streams>(device)) {
  c10::DeviceGuard on_device(device_);  // NCCL takes the calling thread's device
  comm_ = collective::NcclCommunicator::connect(id, options);
}

NcclBuckets::~NcclBuckets() = default;

NcclBuckets::Produced NcclBuckets::produced() const {
  auto event = std::make_shared<c10::Event>(device_.type());
  event->record(streams_->impl.getStream(device_));
  return event;
}

void NcclBuckets::reduce(const torch::Tensor& flat, const Produced& produced) {
  c10::DeviceGuard on_device(device_);
  static_cast<c10::Event*>(produced.get())->block(streams_->nccl);
  c10::StreamGuard on_nccl(streams_->nccl);
  const auto count = static_cast<size_t>(flat.numel());
  if (wire_ == WireDtype::kFloat32) {
    comm_->allreduceSum(flat.data_ptr(), count, wire_, streams_->nccl.native_handle());
  } else {
    // Allocated on NCCL's stream, so the caching allocator keeps it until
    // the sum and the cast back, queued there, are done.
    torch::Tensor narrow = flat.to(wire_ == WireDtype::kFloat16 ? torch::kFloat16 : torch::kBFloat16);
    comm_->allreduceSum(narrow.data_ptr(), count, wire_, streams_->nccl.native_handle());
    flat.copy_(narrow);
  }
  streams_->last.record(streams_->nccl);
  streams_->queued = true;
}

void NcclBuckets::awaitAll(const std::string& what) {
  if (!streams_->queued) return;
  comm_->await([this] { return streams_->last.query(); }, what);
}

void NcclBuckets::computeWaits() const {
  if (streams_->queued) streams_->last.block(streams_->impl.getStream(device_));
}

}  // namespace tandem::train
