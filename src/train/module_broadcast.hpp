#pragma once
// One module's whole state (parameters, then buffers, in registration order)
// sent from one rank to all: how every all-reduce replica starts equal, in
// the trainer and in the public API alike.
#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <vector>

namespace tandem::train {

// Packs the state, hands the bytes to `broadcast(data, bytes)` (which must
// run the collective, from `root`, and wait for it), then, unless this rank
// is the root, copies the received bytes back into the tensors. Tensors may
// live on any device; the bytes travel through host memory.
void broadcastModuleState(torch::nn::Module& module, bool is_root,
                          const std::function<void(void* data, size_t bytes)>& broadcast);
// The same for any tensors (a Python state dict's values), in order.
void broadcastTensors(const std::vector<torch::Tensor>& tensors, bool is_root,
                      const std::function<void(void* data, size_t bytes)>& broadcast);

}  // namespace tandem::train
