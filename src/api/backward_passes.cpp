#include "api/backward_passes.hpp"

#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>

#include "core/error.hpp"

namespace tandem::api {

struct BackwardPasses::State {
  int per_step = 1;
  int done = 0;          // passes finished in this update
  bool in_pass = false;  // a hook of the running pass has fired
  bool synchronized = false;
  std::function<void(int, bool)> arm;
};

BackwardPasses::BackwardPasses(const std::vector<torch::Tensor>& params, int per_step,
                               std::function<void(int, bool)> arm)
    : state_(std::make_shared<State>()) {
  if (per_step < 1) throw InputError(fmt::format("backward_passes_per_step must be at least 1, got {}", per_step));
  state_->per_step = per_step;
  state_->arm = std::move(arm);
  std::weak_ptr<State> weak = state_;
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    auto hook = [weak](const torch::Tensor&) {
      auto s = weak.lock();
      if (!s || s->in_pass) return;
      if (s->done >= s->per_step) {
        throw InputError(fmt::format("tandem: backward pass {} before step(), but backward_passes_per_step is {}",
                                     s->done + 1, s->per_step));
      }
      s->in_pass = true;
      // Runs once this backward pass has delivered every gradient.
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        auto st = weak.lock();
        if (!st) return;
        st->in_pass = false;
        ++st->done;
        if (st->done < st->per_step) st->arm(st->done, st->done + 1 == st->per_step);
      });
    };
    hooks_.emplace_back(p, p.register_hook(hook));
  }
}

BackwardPasses::~BackwardPasses() {
  for (auto& [tensor, handle] : hooks_) tensor.remove_hook(handle);
}

void BackwardPasses::startUpdate() {
  state_->done = 0;
  state_->in_pass = false;
  state_->synchronized = false;
  state_->arm(0, state_->per_step == 1);
}

void BackwardPasses::requireComplete(const char* call) const {
  if (state_->done != state_->per_step) {
    throw InputError(fmt::format("tandem::{}: {} backward pass(es) since the last step, but backward_passes_per_step "
                                 "is {}",
                                 call, state_->done, state_->per_step));
  }
}

int BackwardPasses::perStep() const { return state_->per_step; }
int BackwardPasses::passes() const { return state_->done + (state_->in_pass ? 1 : 0); }
bool BackwardPasses::synchronized() const { return state_->synchronized; }
void BackwardPasses::markSynchronized() { state_->synchronized = true; }

}  // namespace tandem::api
