#include "train/chunked_parameters.hpp"

#include <algorithm>
#include <cstring>

namespace tandem::train {

ChunkedParameters::ChunkedParameters(std::vector<torch::Tensor> params, const ps::KeyLayout& layout)
    : params_(std::move(params)), offsets_(layout.tensor_offsets), pieces_(layout.chunks.size()) {
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
  const auto* source = static_cast<const char*>(values);
  for (const auto& p : pieces_[chunk]) {
    const char* from = source + static_cast<size_t>(p.chunk_offset) * wireBytes(format);
    float* to = params_[p.param].data_ptr<float>() + p.param_offset;
    if (from == reinterpret_cast<const char*>(to)) continue;  // written in place (shared memory)
    decodeWire(format, from, to, static_cast<size_t>(p.count));
  }
}

size_t ChunkedParameters::chunksThrough(size_t count) const {
  return chunks_through_.at(std::min(count, params_.size()));
}

void ChunkedParameters::placeIn(const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  for (size_t p = 0; p < params_.size(); ++p) {
    torch::Tensor place = flat.narrow(0, offsets_[p], params_[p].numel()).view(params_[p].sizes());
    place.copy_(params_[p]);
    params_[p].set_data(place);
  }
}

}  // namespace tandem::train
