#include "ps/row_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace tandem::ps {
namespace {

constexpr size_t kRowsPerPage = 4096;

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t rowKey(uint32_t table, int64_t id) {
  return mix64(static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(table) + 1));
}

}  // namespace

int serverOfRow(uint32_t table, int64_t id, int servers) {
  TANDEM_ENFORCE(servers > 0, "serverOfRow: {} servers", servers);
  return static_cast<int>(rowKey(table, id) % static_cast<uint64_t>(servers));
}

UniqueRows uniqueRows(std::span<const int64_t> ids) {
  std::vector<uint32_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&ids](uint32_t a, uint32_t b) { return ids[a] < ids[b]; });
  UniqueRows rows;
  rows.inverse.resize(ids.size());
  for (uint32_t k : order) {
    if (rows.ids.empty() || rows.ids.back() != ids[k]) rows.ids.push_back(ids[k]);
    rows.inverse[k] = static_cast<uint32_t>(rows.ids.size() - 1);
  }
  return rows;
}

void sumByRow(const UniqueRows& rows, std::span<const float> grads, size_t dim, std::span<float> out) {
  enforceEq(grads.size(), rows.inverse.size() * dim, "sumByRow: gradient floats");
  enforceEq(out.size(), rows.ids.size() * dim, "sumByRow: output floats");
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t k = 0; k < rows.inverse.size(); ++k) {
    float* to = out.data() + rows.inverse[k] * dim;
    const float* from = grads.data() + k * dim;
    for (size_t i = 0; i < dim; ++i) to[i] += from[i];
  }
}

void initialRow(uint64_t seed, uint32_t table, int64_t id, float scale, std::span<float> out) {
  const uint64_t base = mix64(seed ^ rowKey(table, id));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t bits = mix64(base + 0x9e3779b97f4a7c15ULL * (i + 1));
    const float unit = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
    out[i] = (2.0f * unit - 1.0f) * scale;
  }
}

RowTable::RowTable(RowTableOptions options)
    : options_(std::move(options)),
      block_floats_(options_.dim * static_cast<size_t>(1 + optim::sparseSlotCount(options_.optimizer))) {
  if (options_.dim == 0) throw InputError(fmt::format("{}: an embedding dimension of 0", options_.name));
  if (options_.num_rows <= 0) throw InputError(fmt::format("{}: {} rows", options_.name, options_.num_rows));
}

void RowTable::requireInRange(int64_t id) const {
  if (id < 0 || id >= options_.num_rows) {
    throw InputError(fmt::format("{}: row id {} is out of range (the table has {} rows)", options_.name, id,
                                 options_.num_rows));
  }
}

uint32_t RowTable::slot(int64_t id) {
  const auto [it, made] = index_.try_emplace(id, static_cast<uint32_t>(index_.size()));
  if (!made) return it->second;
  if (it->second / kRowsPerPage == pages_.size()) {
    pages_.push_back(std::make_unique<float[]>(kRowsPerPage * block_floats_));
  }
  versions_.push_back(1);
  float* row = block(it->second);
  initialRow(options_.seed, options_.table, id, options_.init_scale, {row, options_.dim});
  optim::initializeSlots(options_.optimizer, {row, block_floats_}, options_.dim);
  return it->second;
}

float* RowTable::block(uint32_t slot) {
  return pages_[slot / kRowsPerPage].get() + (slot % kRowsPerPage) * block_floats_;
}

void RowTable::pull(std::span<const int64_t> ids, std::span<float> out, std::span<uint32_t> versions) {
  const size_t dim = options_.dim;
  enforceEq(out.size(), ids.size() * dim, "RowTable::pull: output floats");
  if (!versions.empty()) enforceEq(versions.size(), ids.size(), "RowTable::pull: versions");
  for (int64_t id : ids) requireInRange(id);
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint32_t at = slot(ids[k]);
    std::copy_n(block(at), dim, out.data() + k * dim);
    if (!versions.empty()) versions[k] = versions_[at];
  }
}

void RowTable::checkPush(std::span<const int64_t> ids, std::span<const float> grads) const {
  const size_t dim = options_.dim;
  if (grads.size() != ids.size() * dim) {
    throw InputError(fmt::format("{}: a push of {} rows carries {} floats, not {} x {}", options_.name, ids.size(),
                                 grads.size(), ids.size(), dim));
  }
  for (int64_t id : ids) requireInRange(id);
}

void RowTable::apply(std::span<const int64_t> ids, std::span<const float> grads, double lr) {
  const size_t dim = options_.dim;
  checkPush(ids, grads);
  const optim::SparseStep step = optim::sparseStep(options_.optimizer, lr, steps_ + 1, dim);
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint32_t at = slot(ids[k]);
    optim::applyRow(step, {block(at), block_floats_}, grads.subspan(k * dim, dim));
    ++versions_[at];
  }
  ++steps_;
}

uint32_t RowTable::version(int64_t id) const {
  const auto it = index_.find(id);
  return it == index_.end() ? 0 : versions_[it->second];
}

size_t RowTable::bytes() const { return index_.size() * block_floats_ * sizeof(float); }

}  // namespace tandem::ps
