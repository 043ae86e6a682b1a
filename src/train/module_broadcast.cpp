#include "train/module_broadcast.hpp"

#include <cstring>
#include <vector>

namespace tandem::train {

void broadcastModuleState(torch::nn::Module& module, bool is_root,
                          const std::function<void(void* data, size_t bytes)>& broadcast) {
  std::vector<torch::Tensor> tensors = module.parameters();
  for (auto& b : module.buffers()) tensors.push_back(b);
  broadcastTensors(tensors, is_root, broadcast);
}

void broadcastTensors(const std::vector<torch::Tensor>& tensors, bool is_root,
                      const std::function<void(void* data, size_t bytes)>& broadcast) {
  torch::NoGradGuard no_grad;
  size_t total = 0;
  for (auto& t : tensors) total += t.numel() * t.element_size();
  std::vector<char> packed(total);
  size_t offset = 0;
  for (auto& t : tensors) {
    auto c = t.contiguous().cpu();
    std::memcpy(packed.data() + offset, c.data_ptr(), c.numel() * c.element_size());
    offset += c.numel() * c.element_size();
  }
  broadcast(packed.data(), packed.size());
  if (is_root) return;
  offset = 0;
  for (auto t : tensors) {
    const size_t bytes = t.numel() * t.element_size();
    t.copy_(torch::from_blob(packed.data() + offset, t.sizes(), t.options().device(torch::kCPU)));
    offset += bytes;
  }
}

}  // namespace tandem::train
