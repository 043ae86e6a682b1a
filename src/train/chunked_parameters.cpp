#include "train/chunked_parameters.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "train/optimizer_state.hpp"

namespace tandem::train {

ChunkedParameters::ChunkedParameters(std::vector<torch::Tensor> params, const ps::KeyLayout& layout,
                                     std::shared_ptr<DeviceTransfer> transfer)
    : params_(std::move(params)),
      trained_(params_),
      offsets_(layout.tensor_offsets),
      extents_(layout.chunks),
      pieces_(layout.chunks.size()) {
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const auto& chunk = layout.chunks[c];
    for (size_t p = 0; p < params_.size(); ++p) {
      const int64_t begin = std::max(chunk.begin, offsets_[p]);
      const int64_t end = std::min(chunk.begin + chunk.length, offsets_[p] + params_[p].numel());
      if (begin >= end) continue;
      pieces_[c].push_back({p, begin - offsets_[p], begin - chunk.begin, end - begin});
    }
  }
  // Chunks are contiguous in key order: the first that many parameters end
  // in the chunk holding their last float.
  chunks_through_.assign(params_.size() + 1, 0);
  for (size_t p = 0; p < params_.size(); ++p) {
    const int64_t last = offsets_[p] + params_[p].numel() - 1;
    const auto after = std::upper_bound(layout.chunks.begin(), layout.chunks.end(), last,
                                        [](int64_t f, const ps::Chunk& c) { return f < c.begin; });
    chunks_through_[p + 1] = std::max(chunks_through_[p], static_cast<size_t>(after - layout.chunks.begin()));
  }
  if (!transfer && !params_.empty()) transfer = hostStagingFor(params_.front().device());
  if (transfer) stage(std::move(transfer), layout.total_floats);
}

void ChunkedParameters::stage(std::shared_ptr<DeviceTransfer> transfer, int64_t total) {
  transfer_ = std::move(transfer);
  for (size_t p = 0; p < params_.size(); ++p) {
    TANDEM_ENFORCE(params_[p].device() == params_.front().device(), "parameter {} is on {}, parameter 0 on {}", p,
                   params_[p].device().str(), params_.front().device().str());
  }
  device_flat_ = torch::empty({total}, params_.front().options());
  host_flat_ = transfer_->hostBuffer(total);
  moveInto(device_flat_);
  host_flat_.copy_(device_flat_);
  for (size_t p = 0; p < params_.size(); ++p) {
    params_[p] = host_flat_.narrow(0, offsets_[p], params_[p].numel()).view(params_[p].sizes());
  }
  landed_.resize(pieces_.size());
}

std::vector<float> ChunkedParameters::gather(size_t chunk) const {
  std::vector<float> values(static_cast<size_t>(extents_[chunk].length));
  for (const auto& p : pieces_[chunk]) {
    std::memcpy(values.data() + p.chunk_offset, params_[p.param].data_ptr<float>() + p.param_offset,
                static_cast<size_t>(p.count) * sizeof(float));
  }
  return values;
}

void ChunkedParameters::scatter(size_t chunk, const void* values, WireDtype format) {
  if (transfer_) transfer_->wait(landed_[chunk]);  // its last copy to the device has read the host copy
  const auto* source = static_cast<const char*>(values);
  for (const auto& p : pieces_[chunk]) {
    const char* from = source + static_cast<size_t>(p.chunk_offset) * wireBytes(format);
    float* to = params_[p.param].data_ptr<float>() + p.param_offset;
    if (from == reinterpret_cast<const char*>(to)) continue;  // written in place (shared memory)
    decodeWire(format, from, to, static_cast<size_t>(p.count));
  }
  if (!transfer_) return;
  // Chunks are contiguous in key order: one copy.
  const ps::Chunk& at = extents_[chunk];
  landed_[chunk] =
      transfer_->toDevice(host_flat_.narrow(0, at.begin, at.length), device_flat_.narrow(0, at.begin, at.length));
}

size_t ChunkedParameters::chunksThrough(size_t count) const {
  return chunks_through_.at(std::min(count, params_.size()));
}

void ChunkedParameters::placeIn(const torch::Tensor& flat) {
  TANDEM_ENFORCE(!transfer_, "placeIn on a staged model");
  moveInto(flat);
}

void ChunkedParameters::moveInto(const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  for (size_t p = 0; p < params_.size(); ++p) {
    torch::Tensor place = flat.narrow(0, offsets_[p], params_[p].numel()).view(params_[p].sizes());
    place.copy_(params_[p]);
    params_[p].set_data(place);
  }
}

int64_t ChunkedParameters::appendOptimizerState(size_t chunk, torch::optim::Optimizer& optimizer,
                                                const optim::OptimizerSettings& settings, int64_t updates,
                                                std::vector<float>& values) const {
  const auto length = static_cast<size_t>(extents_[chunk].length);
  values.resize(length * static_cast<size_t>(1 + optim::slotCount(settings)), 0.0f);
  for (const auto& piece : pieces_[chunk]) {
    const auto state = readKernelState(optimizer, trained_[piece.param], settings);
    if (!state) continue;  // never updated: zero slots
    if (state->updates >= 0) updates = state->updates;
    for (size_t k = 0; k < state->slots.size(); ++k) {
      if (!state->slots[k].defined()) continue;
      auto src = state->slots[k].cpu().contiguous();
      std::memcpy(values.data() + (k + 1) * length + static_cast<size_t>(piece.chunk_offset),
                  src.data_ptr<float>() + piece.param_offset, static_cast<size_t>(piece.count) * sizeof(float));
    }
  }
  return updates;
}

}  // namespace tandem::train
