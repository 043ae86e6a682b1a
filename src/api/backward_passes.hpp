#pragma once
// Counts the backward passes of an update in a loop the user writes, where
// nothing calls Tandem between one backward and the next: a hook on every
// parameter notices a pass start, and autograd's end-of-pass callback readies
// the gradient exchange for the next pass (Horovod's backward_passes_per_step).
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace tandem::api {

class BackwardPasses {
 public:
  // arm(pass, last): readies the exchange before pass `pass` of an update;
  // `last` marks the pass whose gradients are handed over. Register before
  // the exchange's own hooks, so that a pass too many is refused first.
  BackwardPasses(const std::vector<torch::Tensor>& params, int per_step, std::function<void(int, bool)> arm);
  ~BackwardPasses();
  BackwardPasses(const BackwardPasses&) = delete;
  BackwardPasses& operator=(const BackwardPasses&) = delete;

  // A new update: no pass yet; arms pass 0.
  void startUpdate();
  // Throws InputError naming `call` unless exactly per_step passes ran.
  void requireComplete(const char* call) const;
  int perStep() const;
  // Passes finished (or running) in this update, and whether the exchange
  // of their gradients has been waited for.
  int passes() const;
  bool synchronized() const;
  void markSynchronized();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

}  // namespace tandem::api
