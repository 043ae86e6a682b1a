#include "train/gradient_buckets.hpp"

#include "core/error.hpp"

namespace tandem::train {

struct GradientBuckets::State {
  struct Slot {
    torch::Tensor param;
    torch::Tensor view;  // slot in the bucket, shaped like the parameter
    size_t bucket = 0;
    bool touched = false;  // got a gradient in this update
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<size_t> slots;
    size_t pending = 0;  // slots still to be written on the last micro-step
    bool ready = false;
  };
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  torch::Tensor tail;
  size_t next_launch = 0;
  bool last_micro = true;
  double scale = 1.0;
  LaunchFn launch;
  std::function<void()> before_last_launch;

  void launchReadyInOrder() {
    while (next_launch < buckets.size() && buckets[next_launch].ready) {
      if (next_launch + 1 == buckets.size() && before_last_launch) before_last_launch();
      launch(next_launch, buckets[next_launch].flat);
      ++next_launch;
    }
  }

  void onGradient(size_t index, const torch::Tensor& grad) {
    torch::NoGradGuard no_grad;
    Slot& slot = slots[index];
    if (!slot.touched) {
      at::mul_out(slot.view, grad, scale);
      slot.touched = true;
    } else {
      slot.view.add_(grad, scale);
    }
    if (!last_micro) return;
    Bucket& bucket = buckets[slot.bucket];
    if (--bucket.pending == 0) {
      bucket.ready = true;
      launchReadyInOrder();
    }
  }
};

GradientBuckets::GradientBuckets(torch::nn::Module& model, size_t cap_bytes, size_t extra_tail, LaunchFn launch,
                                 std::function<void()> before_last_launch)
    : state_(std::make_shared<State>()) {
  state_->launch = std::move(launch);
  state_->before_last_launch = std::move(before_last_launch);
  std::vector<torch::Tensor> params;
  auto named = model.named_parameters();
  for (const auto& item : named) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (p.scalar_type() != torch::kFloat32 || p.is_sparse()) {
      throw Error(fmt::format("parameter {} is {} but all-reduce buckets hold dense float32", item.key(),
                              std::string(c10::toString(p.scalar_type()))));
    }
    params.push_back(p);
  }
  TANDEM_ENFORCE(!params.empty(), "model has no trainable parameters");

  // Reverse registration order approximates the order backward produces them.
  std::vector<std::vector<size_t>> layout(1);
  std::vector<int64_t> elements(1, 0);
  const size_t cap_elements = std::max<size_t>(1, cap_bytes / sizeof(float));
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t n = params[k].numel();
    if (!layout.back().empty() && static_cast<size_t>(elements.back() + n) > cap_elements) {
      layout.emplace_back();
      elements.push_back(0);
    }
    layout.back().push_back(k);
    elements.back() += n;
  }

  state_->slots.resize(params.size());
  for (size_t b = 0; b < layout.size(); ++b) {
    const bool last = b + 1 == layout.size();
    State::Bucket bucket;
    bucket.flat = torch::zeros({elements[b] + (last ? static_cast<int64_t>(extra_tail) : 0)}, torch::kFloat32);
    int64_t offset = 0;
    for (size_t k : layout[b]) {
      State::Slot& slot = state_->slots[k];
      slot.param = params[k];
      slot.bucket = b;
      slot.view = bucket.flat.narrow(0, offset, params[k].numel()).view(params[k].sizes());
      offset += params[k].numel();
      bucket.slots.push_back(k);
    }
    if (last) state_->tail = bucket.flat.narrow(0, offset, static_cast<int64_t>(extra_tail));
    state_->buckets.push_back(std::move(bucket));
  }

  // Hooks hold the state, not `this`: they stay valid whichever dies first.
  std::weak_ptr<State> weak = state_;
  for (size_t k = 0; k < params.size(); ++k) {
    unsigned handle = params[k].register_hook([weak, k](torch::Tensor grad) {
      if (auto state = weak.lock()) state->onGradient(k, grad);
    });
    hooks_.emplace_back(params[k], handle);
  }
}

GradientBuckets::~GradientBuckets() {
  for (auto& [param, handle] : hooks_) param.remove_hook(handle);
}

size_t GradientBuckets::size() const { return state_->buckets.size(); }

size_t GradientBuckets::bucketBytes(size_t bucket) const {
  return static_cast<size_t>(state_->buckets.at(bucket).flat.numel()) * sizeof(float);
}

torch::Tensor GradientBuckets::tail() const { return state_->tail; }

void GradientBuckets::beginMicroStep(int micro_step, bool last, double scale) {
  State& s = *state_;
  if (micro_step == 0) {
    for (auto& slot : s.slots) slot.touched = false;
    for (auto& bucket : s.buckets) bucket.ready = false;
    s.next_launch = 0;
  }
  if (last) {
    for (auto& bucket : s.buckets) bucket.pending = bucket.slots.size();
  }
  s.last_micro = last;
  s.scale = scale;
}

void GradientBuckets::flush() {
  State& s = *state_;
  torch::NoGradGuard no_grad;
  for (auto& bucket : s.buckets) {
    if (bucket.ready) continue;
    for (size_t k : bucket.slots) {
      if (!s.slots[k].touched) s.slots[k].view.zero_();
    }
    bucket.ready = true;
  }
  s.launchReadyInOrder();
}

void GradientBuckets::exposeGradients() {
  for (auto& slot : state_->slots) slot.param.mutable_grad() = slot.view;
}

}  // namespace tandem::train
