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

std::vector<Chunk> KeyLayout::chunksHeldBy(int server) const {
  std::vector<Chunk> out;
  for (const auto& c : chunks) {
    if (c.server == server || c.backup == server) out.push_back(c);
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
    if (c.backup >= 0) h.addValue(c.backup);
  }
  return h.value();
}

KeyLayout buildKeyLayout(const std::vector<TensorSpec>& tensors, int servers, int64_t chunk_bytes, int replicas) {
  if (servers < 1) throw InputError(fmt::format("parameter servers: need at least 1, got {}", servers));
  if (replicas < 1 || replicas > 2 || replicas > servers) {
    throw InputError(fmt::format("--ps-replicas {} with {} server(s): expected 1, or 2 with at least 2 servers",
                                 replicas, servers));
  }
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
    if (replicas == 2) c.backup = (c.server + 1) % servers;
    layout.chunks.push_back(c);
  }
  return layout;
}

int64_t autoPsChunkFloats(int64_t total_floats, int servers) {
  constexpr int64_t kLargest = (4 << 20) / 4;
  auto ceilDiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  if (servers <= 2) return std::clamp(ceilDiv(total_floats, 32), int64_t{(32 << 10) / 4}, kLargest);
  constexpr int64_t kSmallest = (16 << 10) / 4;
  // Where the floor binds, the same number of chunks on every server: one
  // more chunk on a server is that much more on its link.
  const int64_t even = total_floats / (kSmallest * servers) * servers;
  if (even < servers) return kSmallest;
  const int64_t chunks = std::min(int64_t{16} * servers, even);
  return std::clamp(ceilDiv(total_floats, chunks), kSmallest, kLargest);
}

int64_t chunkFloatsFor(int64_t total_floats, int64_t requested_chunk_floats, int servers) {
  if (servers < 1) throw InputError(fmt::format("parameter servers: need at least 1, got {}", servers));
  if (requested_chunk_floats < 1) {
    throw InputError(fmt::format("--ps-chunk-mb: a chunk of {} floats is not positive", requested_chunk_floats));
  }
  if (total_floats < 0) throw InputError(fmt::format("parameter layout: negative model size {}", total_floats));
  // Ceil division written so that huge requests cannot overflow; total > 0 wherever it is used.
  auto chunksOfSize = [&](int64_t chunk) { return (total_floats - 1) / chunk + 1; };
  if (total_floats == 0 || chunksOfSize(requested_chunk_floats) >= servers) return requested_chunk_floats;
  if (total_floats < servers) return 1;
  const int64_t even = (total_floats - 1) / servers + 1;
  if (chunksOfSize(even) >= servers) return even;
  return total_floats / servers;
}

std::vector<int> idleServers(const KeyLayout& layout) {
  std::vector<int> idle;
  for (size_t s = 0; s < layout.server_floats.size(); ++s) {
    if (layout.server_floats[s] == 0) idle.push_back(static_cast<int>(s));
  }
  return idle;
}

}  // namespace tandem::ps
