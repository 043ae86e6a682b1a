#pragma once
// A DeviceTransfer for the CPU that behaves as an asynchronous copier can:
// a copy to the host takes its values when issued but writes them only when
// waited for, so a reader that skips the wait sees stale host values; a
// copy to the device writes at once and notes it if its host values are
// rewritten before it was waited for.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "train/device_transfer.hpp"

namespace tandem::testing {

class HeldTransfer final : public train::DeviceTransfer {
 public:
  torch::Tensor hostBuffer(int64_t floats) override { return torch::full({floats}, -99.0f); }

  Marker toHost(const torch::Tensor& device, const torch::Tensor& host) override {
    checkHazards();
    ++to_host;
    return std::make_shared<Copy>(Copy{device.clone(), host, false});
  }

  Marker toDevice(const torch::Tensor& host, const torch::Tensor& device) override {
    checkHazards();
    ++to_device;
    device.copy_(host);
    auto copy = std::make_shared<Copy>(Copy{host.clone(), host, true});
    reading_.push_back(copy);
    return copy;
  }

  void wait(const Marker& done) override {
    if (!done) return;
    auto& copy = *static_cast<Copy*>(done.get());
    if (copy.read_host) {
      check(copy);
      return;
    }
    copy.host.copy_(copy.values);
  }

  // Notes every copy to the device not yet waited for whose host values
  // changed; called by each copy, and by a test before it looks.
  void checkHazards() {
    for (const auto& weak : reading_) {
      if (auto copy = weak.lock(); copy && copy->read_host) check(*copy);
    }
  }

  int to_host = 0, to_device = 0;
  std::vector<std::string> rewritten_early;  // hazards seen

 private:
  struct Copy {
    torch::Tensor values;  // what the copy carries
    torch::Tensor host;
    bool read_host;        // a copy to the device, not yet waited for
  };
  // Checked once: waited for now, or a hazard now.
  void check(Copy& copy) {
    if (!torch::equal(copy.values, copy.host)) rewritten_early.push_back("a host buffer a copy to the device was reading");
    copy.read_host = false;
  }
  std::vector<std::weak_ptr<Copy>> reading_;
};

}  // namespace tandem::testing
