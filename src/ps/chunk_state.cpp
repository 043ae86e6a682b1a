#include "ps/chunk_state.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <iterator>
#include <memory>
#include <numeric>
#include <span>

#include "optim/kernels.hpp"

namespace tandem::ps {

void initChunk(ChunkState& c, const ChunkRange& range, const optim::OptimizerSettings& optimizer, int workers,
               std::vector<int> pushers) {
  c.pushers = std::move(pushers);
  c.key = range.key;
  c.length = range.length;
  c.param.assign(static_cast<size_t>(range.length), 0.0f);
  c.slots.assign(static_cast<size_t>(optim::slotCount(optimizer)), std::vector<float>(static_cast<size_t>(range.length), 0.0f));
  c.step_grads.resize(static_cast<size_t>(workers));
  c.step_grad_us.assign(static_cast<size_t>(workers), 0);
  c.ahead_grads.resize(static_cast<size_t>(workers));
  c.ahead_grad_us.assign(static_cast<size_t>(workers), 0);
}

size_t paramBytes(const ChunkState& c) { return static_cast<size_t>(c.length) * sizeof(float); }

size_t stateBytes(const ChunkState& c) { return paramBytes(c) * (1 + c.slots.size()); }

bool loadChunk(ChunkState& c, std::span<const std::byte> payload) {
  const size_t bytes = paramBytes(c);
  const size_t size = payload.size();
  const auto* in = payload.data();
  if (size == stateBytes(c)) {
    // A resumed run: the optimizer state comes along.
    for (size_t k = 0; k < c.slots.size(); ++k) std::memcpy(c.slots[k].data(), in + (k + 1) * bytes, bytes);
  } else if (size != bytes) {
    return false;
  }
  std::memcpy(c.param.data(), in, bytes);
  return true;
}

SharedBytes packState(const ChunkState& c) {
  const size_t bytes = paramBytes(c);
  auto packed = std::make_shared<std::vector<std::byte>>(stateBytes(c));
  std::byte* out = packed->data();
  std::memcpy(out, c.param.data(), bytes);
  for (size_t k = 0; k < c.slots.size(); ++k) std::memcpy(out + (k + 1) * bytes, c.slots[k].data(), bytes);
  return {packed, *packed};
}

void refreshWireCopy(ChunkState& c, WireDtype wire) {
  if (wire == WireDtype::kFloat32) return;
  auto copy = std::make_shared<std::vector<uint16_t>>(c.param.size());
  encodeWire(wire, c.param.data(), copy->data(), c.param.size());
  c.wire_param = std::move(copy);
}

size_t wirePayloadBytes(const ChunkState& c, WireDtype wire) { return static_cast<size_t>(c.length) * wireBytes(wire); }

float* floatsOf(std::span<std::byte> bytes, std::vector<float>& scratch) {
  auto address = reinterpret_cast<uintptr_t>(bytes.data());
  if (address % alignof(float) == 0) return reinterpret_cast<float*>(bytes.data());
  scratch.resize(bytes.size() / sizeof(float));
  std::memcpy(scratch.data(), bytes.data(), bytes.size());
  return scratch.data();
}

float* gradientOf(std::span<std::byte> bytes, size_t length, const PushFormat& format, std::vector<float>& scratch) {
  if (format.raw()) return floatsOf(bytes, scratch);
  scratch.resize(length);
  format.decode(bytes.data(), scratch.data(), length);
  return scratch.data();
}

float* sumGradients(std::vector<OwnedBytes>& grads, size_t length, const PushFormat& format,
                    std::vector<float>& scratch, bool shared) {
  float* sum = gradientOf(grads[0].bytes, length, format, scratch);
  if (shared && sum != scratch.data()) {
    scratch.assign(sum, sum + length);
    sum = scratch.data();
  }
  if (!format.raw()) {
    for (size_t w = 1; w < grads.size(); ++w) format.decodeAdd(grads[w].data(), sum, length);
    return sum;
  }
  std::vector<float> addend_scratch;
  for (size_t w = 1; w < grads.size(); ++w) optim::addInto({sum, length}, {floatsOf(grads[w].bytes, addend_scratch), length});
  return sum;
}

void applyUpdate(ChunkState& c, const float* grad, uint64_t update_index, double lr,
                 const ServerConfig& config, const optim::DelayCorrection* correction,
                 const optim::OptimizerSettings* optimizer) {
  std::array<std::span<float>, optim::kMaxOptimizerSlots> slots;  // no allocation on the apply path
  std::copy(c.slots.begin(), c.slots.end(), slots.begin());
  optim::applyOptimizer(optimizer != nullptr ? *optimizer : config.optimizer, lr, c.param, {grad, static_cast<size_t>(c.length)},
                 std::span(slots.data(), c.slots.size()), static_cast<int64_t>(update_index + 1), correction);
  refreshWireCopy(c, config.wire);
}

namespace {

// Moves the pulls that `take` selects out of the chunk, keeping both orders.
template <class Take>
std::vector<PendingPull> takePulls(ChunkState& c, Take take) {
  auto kept_end = std::stable_partition(c.pulls.begin(), c.pulls.end(), [&](const PendingPull& p) { return !take(p); });
  std::vector<PendingPull> taken(std::make_move_iterator(kept_end), std::make_move_iterator(c.pulls.end()));
  c.pulls.erase(kept_end, c.pulls.end());
  return taken;
}

}  // namespace

std::vector<PendingPull> takeReadyPulls(ChunkState& c) {
  if (c.busy) return {};
  return takePulls(c, [&](const PendingPull& p) {
    if (p.snapshot.empty()) return p.needed <= c.applied;
    if (c.applied != c.received) return false;  // pushes still queued or applying
    for (size_t w = 0; w < p.snapshot.size() && w < c.pushed_through.size(); ++w) {
      if (c.pushed_through[w] < p.snapshot[w]) return false;
    }
    return true;
  });
}

std::shared_ptr<const std::vector<float>> recordPull(ChunkState& c, size_t worker) {
  auto& record = c.pulled_by.at(worker);
  if (record && record.use_count() == 1) {
    // No reply holds it any more; the fence orders our writes after the
    // last sender's reads (its release of the reference).
    std::atomic_thread_fence(std::memory_order_acquire);
    std::memcpy(record->data(), c.param.data(), paramBytes(c));
  } else {
    record = std::make_shared<std::vector<float>>(c.param);
  }
  return record;
}

SharedBytes pullPayload(const ChunkState& c, const PendingPull& pull, bool sync, WireDtype wire) {
  if (pull.with_state) return packState(c);
  if (wire != WireDtype::kFloat32) {
    return {c.wire_param, std::as_bytes(std::span(*c.wire_param)).first(wirePayloadBytes(c, wire))};
  }
  if (sync && pull.needed == c.applied) {
    // No owner: retired chunks are kept (ChunkStore::reset), so the values outlive the send.
    return {nullptr, std::as_bytes(std::span(c.param))};
  }
  return shared(copyBytes(c.param.data(), paramBytes(c)));
}

SharedBytes pullIntoArena(const ChunkState& c, const ArenaDestination& into, WireDtype wire) {
  const void* values = wire == WireDtype::kFloat32 ? static_cast<const void*>(c.param.data())
                                                   : static_cast<const void*>(c.wire_param->data());
  std::memcpy(into.bytes.data(), values, into.bytes.size());  // its size was checked against the chunk's
  auto ref = std::make_shared<const std::vector<char>>(net::encode(into.ref));
  return {ref, std::as_bytes(std::span(*ref))};
}

std::vector<PendingPull> takeExpiredPulls(ChunkState& c, Clock::duration timeout, Clock::time_point now) {
  if (c.pulls.empty()) return {};
  return takePulls(c, [&](const PendingPull& p) { return now - p.since >= timeout; });
}

int64_t totalFloats(const std::deque<ChunkState>& chunks) {
  return std::accumulate(chunks.begin(), chunks.end(), int64_t{0},
                         [](int64_t n, const ChunkState& c) { return n + c.length; });
}

}  // namespace tandem::ps
