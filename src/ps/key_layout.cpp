#include "ps/key_layout.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/fnv1a.hpp"

namespace tandem::ps {

std::vector<Chunk> KeyLayout::chunksOf(int server) const {
  std::vector<Chunk> out;
  for (const auto& c : chunks) {
    if (c.server == server) out.push_back(c);
  }
  return out;
}

uint64_t KeyLayout::fingerprint() const {
  Fnv1a h;
  for (const auto& t : tensors) {
    h.add(t.name.data(), t.name.size());
    h.addValue(t.numel);
  }
  for (const auto& c : chunks) {
    h.addValue(c.begin);
    h.addValue(c.length);
    h.addValue(c.server);
  }
  return h.value();
}

KeyLayout buildKeyLayout(const std::vector<TensorSpec>& tensors, int servers, int64_t chunk_bytes) {
  if (servers < 1) throw InputError(fmt::format("parameter servers: need at least 1, got {}", servers));
  if (chunk_bytes <= 0 || chunk_bytes % 4 != 0) {
    throw InputError(fmt::format("--ps-chunk-mb: a chunk of {} bytes is not a positive multiple of 4", chunk_bytes));
  }
  if (tensors.empty()) throw InputError("parameter layout: the model has no parameters");
  KeyLayout layout;
  layout.tensors = tensors;
  for (const auto& t : tensors) {
    if (t.numel < 0) throw InputError(fmt::format("parameter layout: tensor {} has negative size", t.name));
    layout.tensor_offsets.push_back(layout.total_floats);
    layout.total_floats += t.numel;
  }
  layout.server_floats.assign(static_cast<size_t>(servers), 0);
  const int64_t chunk_floats = chunk_bytes / 4;
  for (int64_t begin = 0; begin < layout.total_floats; begin += chunk_floats) {
    Chunk c;
    c.key = layout.chunks.size();
    c.begin = begin;
    c.length = std::min(chunk_floats, layout.total_floats - begin);
    // Least-loaded server, lowest index on ties: deterministic everywhere.
    auto lightest = std::min_element(layout.server_floats.begin(), layout.server_floats.end());
    c.server = static_cast<int>(lightest - layout.server_floats.begin());
    *lightest += c.length;
    layout.chunks.push_back(c);
  }
  return layout;
}

}  // namespace tandem::ps
