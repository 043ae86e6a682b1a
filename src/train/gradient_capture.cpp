#include "train/gradient_capture.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace tandem::train {

struct GradientCapture::State {
  struct Slot {
    torch::Tensor param;
    torch::Tensor view;          // in the flat buffer, shaped like the parameter
    std::vector<size_t> groups;  // the groups its floats overlap
    bool touched = false;        // got a gradient in this update
  };
  struct Group {
    Range range;
    size_t params = 0;   // parameters overlapping it
    size_t pending = 0;  // of those, still to deliver on the last micro-step
    bool ready = false;
    DeviceTransfer::Marker on_host;  // staged: its copy to the host buffer
  };
  torch::Tensor flat;         // on the host: what is handed over
  torch::Tensor device_flat;  // staged: the slots, on the parameters' device
  int64_t params_end = 0;     // the slots end here; the rest is the caller's
  std::shared_ptr<DeviceTransfer> transfer;  // null: the slots are in `flat`
  DeviceTransfer::Marker returned;           // staged: the last copy back to the device
  std::vector<Slot> slots;
  std::vector<Group> groups;
  bool in_order = true;
  size_t next_in_order = 0;
  bool last_micro = true;
  double scale = 1.0;
  torch::Tensor scale_tensor = torch::scalar_tensor(1.0, torch::kFloat64);  // `scale`, for mul_out
  ReadyFn ready;

  void markReady(size_t g) {
    groups[g].ready = true;
    if (transfer) {
      // Only the slots: floats past them (a caller's tail) are written on the host.
      const Range& r = groups[g].range;
      const int64_t end = std::min(r.begin + r.length, params_end);
      if (end > r.begin) {
        groups[g].on_host =
            transfer->toHost(device_flat.narrow(0, r.begin, end - r.begin), flat.narrow(0, r.begin, end - r.begin));
      }
    }
    if (!in_order) {
      ready(g);
      return;
    }
    while (next_in_order < groups.size() && groups[next_in_order].ready) ready(next_in_order++);
  }

  void deliver(size_t index) {
    for (size_t g : slots[index].groups) {
      if (--groups[g].pending == 0) markReady(g);
    }
  }

  void onGradient(size_t index, const torch::Tensor& sent) {
    torch::NoGradGuard no_grad;
    // Sparse gradients (an embedding's) travel dense, as Horovod's sparse_as_dense.
    const torch::Tensor grad = sent.is_sparse() ? sent.to_dense() : sent;
    Slot& slot = slots[index];
    if (!slot.touched) {
      // One pass: mul_out with a Scalar computes into a temporary and then
      // copies it into the slot (two passes over every gradient).
      if (scale == 1.0) {
        slot.view.copy_(grad);
      } else {
        at::mul_out(slot.view, grad, scale_tensor);
      }
      slot.touched = true;
    } else {
      slot.view.add_(grad, scale);
    }
    if (last_micro) deliver(index);
  }
};

GradientCapture::GradientCapture(std::vector<torch::Tensor> params, const std::vector<int64_t>& offsets,
                                 int64_t total, const std::vector<Range>& groups, bool in_order, ReadyFn ready,
                                 torch::Tensor buffer, std::shared_ptr<DeviceTransfer> transfer)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  enforceEq(params.size(), offsets.size(), "gradient capture: offsets per parameter");
  TANDEM_ENFORCE(!params.empty(), "model has no trainable parameters");
  const torch::Device device = params.front().device();
  s.transfer = std::move(transfer);
  const torch::Device home = s.transfer ? torch::Device(torch::kCPU) : device;  // where the groups are read
  if (buffer.defined()) {
    TANDEM_ENFORCE(buffer.scalar_type() == torch::kFloat32 && buffer.is_contiguous() && buffer.numel() == total &&
                       buffer.device() == home,
                   "gradient capture: the given buffer is not {} contiguous float32 values on {}", total, home.str());
    s.flat = buffer.zero_();
  } else {
    s.flat = s.transfer ? s.transfer->hostBuffer(total).zero_() : torch::zeros({total}, params.front().options());
  }
  // Staged: the slots live on the parameters' device.
  const torch::Tensor slots = s.transfer ? (s.device_flat = torch::zeros({total}, params.front().options())) : s.flat;
  s.in_order = in_order;
  s.ready = std::move(ready);
  for (const Range& r : groups) {
    TANDEM_ENFORCE(r.begin >= 0 && r.length > 0 && r.begin + r.length <= total, "gradient group [{}, +{}) outside {}",
                   r.begin, r.length, total);
    s.groups.emplace_back().range = r;
  }
  s.slots.resize(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    const torch::Tensor& param = params[p];
    if (param.scalar_type() != torch::kFloat32 || param.is_sparse()) {
      throw Error(fmt::format("parameter {} is {}, but distributed gradients are dense float32", p,
                              std::string(c10::toString(param.scalar_type()))));
    }
    if (param.device() != device) {
      throw InputError(fmt::format("parameter {} is on {} but parameter 0 is on {}: a replica's trainable parameters "
                                   "must share one device",
                                   p, param.device().str(), device.str()));
    }
    const int64_t begin = offsets[p], end = offsets[p] + param.numel();
    TANDEM_ENFORCE(begin >= 0 && end <= total, "parameter {} at [{}, {}) outside {}", p, begin, end, total);
    s.params_end = std::max(s.params_end, end);
    State::Slot& slot = s.slots[p];
    slot.param = param;
    // The parameter's own strides (channels-last, say), so that .grad has
    // its layout; the slot still fills [begin, end) of the buffer.
    if (!param.is_non_overlapping_and_dense()) {
      throw Error(fmt::format("parameter {} overlaps itself or has gaps; distributed gradients need a dense layout", p));
    }
    slot.view = slots.narrow(0, begin, param.numel()).as_strided(param.sizes(), param.strides());
    for (size_t g = 0; g < s.groups.size(); ++g) {
      const Range& r = s.groups[g].range;
      if (std::max(begin, r.begin) < std::min(end, r.begin + r.length)) {
        slot.groups.push_back(g);
        ++s.groups[g].params;
      }
    }
  }
  // Hooks hold the state, not `this`: they stay valid whichever dies first.
  std::weak_ptr<State> weak = state_;
  for (size_t p = 0; p < params.size(); ++p) {
    unsigned handle = params[p].register_hook([weak, p](torch::Tensor grad) {
      if (auto state = weak.lock()) state->onGradient(p, grad);
    });
    hooks_.emplace_back(params[p], handle);
  }
}

GradientCapture::~GradientCapture() {
  for (auto& [param, handle] : hooks_) param.remove_hook(handle);
  // No copy may outlive the buffers it reads or writes.
  if (!state_->transfer) return;
  for (const auto& g : state_->groups) state_->transfer->wait(g.on_host);
  state_->transfer->wait(state_->returned);
}

void GradientCapture::detachFromAutograd() {
  for (auto& [param, handle] : hooks_) param.remove_hook(handle);
  hooks_.clear();
}

void GradientCapture::offer(size_t index, const torch::Tensor& grad) {
  TANDEM_ENFORCE(index < state_->slots.size(), "gradient for parameter {} of {}", index, state_->slots.size());
  state_->onGradient(index, grad);
}

torch::Tensor GradientCapture::flat() const { return state_->flat; }

void GradientCapture::awaitOnHost(size_t index) const {
  if (state_->transfer) state_->transfer->wait(state_->groups.at(index).on_host);
}

bool GradientCapture::staged() const { return state_->transfer != nullptr; }

torch::Tensor GradientCapture::group(size_t index) const {
  const Range& r = state_->groups.at(index).range;
  return state_->flat.narrow(0, r.begin, r.length);
}

void GradientCapture::beginMicroStep(int micro_step, bool last, double scale) {
  State& s = *state_;
  if (micro_step == 0) {
    // The host buffer is rewritten from here; the last copy back read it
    // (long done: the optimizer's step waited for it).
    if (s.transfer) s.transfer->wait(s.returned);
    for (auto& slot : s.slots) slot.touched = false;
    for (auto& g : s.groups) g.ready = false;
    s.next_in_order = 0;
  }
  if (last) {
    for (auto& g : s.groups) g.pending = g.params;
  }
  s.last_micro = last;
  if (scale != s.scale) s.scale_tensor.fill_(scale);
  s.scale = scale;
}

void GradientCapture::flush() {
  State& s = *state_;
  torch::NoGradGuard no_grad;
  for (auto& slot : s.slots) {
    if (!slot.touched) slot.view.zero_();  // no gradient this update: contribute zeros
    slot.touched = true;
  }
  // Every backward of the update has run, so every group is complete now,
  // including one whose parameters got gradients on earlier micro-steps only.
  for (size_t g = 0; g < s.groups.size(); ++g) {
    if (!s.groups[g].ready) s.markReady(g);
  }
}

void GradientCapture::exposeGradients() {
  State& s = *state_;
  if (s.transfer) {
    // On the copy stream, after the copies to the host (the same stream);
    // the optimizer's kernels, queued later, wait for it.
    s.returned = s.transfer->toDevice(s.flat.narrow(0, 0, s.params_end), s.device_flat.narrow(0, 0, s.params_end));
  }
  for (auto& slot : s.slots) slot.param.mutable_grad() = slot.view;
}

}  // namespace tandem::train
