#include "train/chunked_parameters.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace tandem::train {

ChunkedParameters::ChunkedParameters(std::vector<torch::Tensor> params, const ps::KeyLayout& layout,
                                     std::shared_ptr<DeviceTransfer> transfer)
    : params_(std::move(params)), trained_(params_), offsets_(layout.tensor_offsets), pieces_(layout.chunks.size()) {
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
  if (transfer) stage(std::move(transfer));
}

void ChunkedParameters::stage(std::shared_ptr<DeviceTransfer> transfer) {
  torch::NoGradGuard no_grad;
  transfer_ = std::move(transfer);
  int64_t total = 0;
  for (size_t p = 0; p < params_.size(); ++p) {
    TANDEM_ENFORCE(params_[p].device() == params_.front().device(), "parameter {} is on {}, parameter 0 on {}", p,
                   params_[p].device().str(), params_.front().device().str());
    total = std::max(total, offsets_[p] + params_[p].numel());
  }
  device_flat_ = torch::empty({total}, params_.front().options());
  host_flat_ = transfer_->hostBuffer(total);
  for (size_t p = 0; p < params_.size(); ++p) {
    torch::Tensor place = device_flat_.narrow(0, offsets_[p], params_[p].numel()).view(params_[p].sizes());
    place.copy_(params_[p]);
    params_[p].set_data(place);  // the same parameter (the optimizer's key), in the flat buffer
  }
  host_flat_.copy_(device_flat_);
  for (size_t p = 0; p < params_.size(); ++p) {
    params_[p] = host_flat_.narrow(0, offsets_[p], params_[p].numel()).view(params_[p].sizes());
  }
  landed_.resize(pieces_.size());
}

std::vector<float> ChunkedParameters::gather(size_t chunk) const {
  int64_t length = 0;
  for (const auto& p : pieces_[chunk]) length = std::max(length, p.chunk_offset + p.count);
  std::vector<float> values(static_cast<size_t>(length));
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
  if (!transfer_ || pieces_[chunk].empty()) return;
  // Chunks are contiguous in key order: one copy.
  const Piece& first = pieces_[chunk].front();
  const int64_t begin = offsets_[first.param] + first.param_offset;
  int64_t length = 0;
  for (const auto& p : pieces_[chunk]) length = std::max(length, p.chunk_offset + p.count);
  landed_[chunk] = transfer_->toDevice(host_flat_.narrow(0, begin, length), device_flat_.narrow(0, begin, length));
}

size_t ChunkedParameters::chunksThrough(size_t count) const {
  return chunks_through_.at(std::min(count, params_.size()));
}

void ChunkedParameters::placeIn(const torch::Tensor& flat) {
  TANDEM_ENFORCE(!transfer_, "placeIn on a staged model");
  torch::NoGradGuard no_grad;
  for (size_t p = 0; p < params_.size(); ++p) {
    torch::Tensor place = flat.narrow(0, offsets_[p], params_[p].numel()).view(params_[p].sizes());
    place.copy_(params_[p]);
    params_[p].set_data(place);
  }
}

}  // namespace tandem::train
