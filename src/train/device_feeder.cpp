#include "train/device_feeder.hpp"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "core/error.hpp"

namespace tandem::train {
namespace {

class StreamCopier final : public BatchCopier {
 public:
  explicit StreamCopier(const torch::Device& device)
      : device_(device), impl_(device.type()), copy_stream_(impl_.getStreamFromGlobalPool(device)) {}

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
    const c10::Stream compute = impl_.getStream(device_);
    static_cast<c10::Event*>(ticket.done.get())->block(compute);
    for (const auto* t : {&ticket.batch.inputs, &ticket.batch.targets}) {
      impl_.recordDataPtrOnStream(t->storage().data_ptr(), compute);
    }
    return std::move(ticket.batch);
  }

 private:
  torch::Device device_;
  c10::impl::VirtualGuardImpl impl_;
  c10::Stream copy_stream_;
};

}  // namespace

std::unique_ptr<BatchCopier> makeStreamCopier(const torch::Device& device) {
  return std::make_unique<StreamCopier>(device);
}

DeviceFeeder::DeviceFeeder(std::function<data::Batch()> source, int64_t count, std::unique_ptr<BatchCopier> copier)
    : source_(std::move(source)), remaining_(count), copier_(std::move(copier)) {}

data::Batch DeviceFeeder::next() {
  if (!copier_) {
    --remaining_;
    return source_();
  }
  if (!ahead_) {
    TANDEM_ENFORCE(remaining_ > 0, "no batch left to feed");
    --remaining_;
    ahead_ = copier_->issue(source_());
  }
  BatchCopier::Ticket current = std::move(*ahead_);
  ahead_.reset();
  if (remaining_ > 0) {
    --remaining_;
    ahead_ = copier_->issue(source_());
  }
  return copier_->collect(std::move(current));
}

}  // namespace tandem::train
