#include "train/device_feeder.hpp"

#include "core/error.hpp"

namespace tandem::train {

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
