#include "ps/row_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "core/error.hpp"

namespace tandem::ps {

size_t RowCache::dim(uint32_t table) const {
  const auto it = dims_.find(table);
  TANDEM_ENFORCE(it != dims_.end(), "row cache: no table {}", table);
  return it->second;
}

std::vector<uint32_t> RowCache::held(uint32_t table, std::span<const int64_t> ids) const {
  std::vector<uint32_t> versions(ids.size(), 0);
  const auto it = tables_.find(table);
  if (it == tables_.end()) return versions;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (const auto row = it->second.find(ids[k]); row != it->second.end()) versions[k] = row->second.version;
  }
  return versions;
}

void RowCache::update(uint32_t table, std::span<const int64_t> ids, const RowPullReply& reply) {
  const size_t d = dim(table);
  enforceEq(reply.versions.size(), reply.positions.size(), "row pull reply: versions");
  enforceEq(reply.values.size(), reply.positions.size() * d, "row pull reply: values");
  auto& rows = tables_[table];
  for (size_t r = 0; r < reply.positions.size(); ++r) {
    TANDEM_ENFORCE(reply.positions[r] < ids.size(), "row pull reply: position {} of {} ids", reply.positions[r],
                   ids.size());
    Row& row = rows[ids[reply.positions[r]]];
    row.version = reply.versions[r];
    row.values.assign(reply.values.begin() + static_cast<std::ptrdiff_t>(r * d),
                      reply.values.begin() + static_cast<std::ptrdiff_t>((r + 1) * d));
  }
}

void RowCache::gather(uint32_t table, std::span<const int64_t> ids, std::span<float> out) const {
  const size_t d = dim(table);
  enforceEq(out.size(), ids.size() * d, "row cache gather: output floats");
  const auto it = tables_.find(table);
  for (size_t k = 0; k < ids.size(); ++k) {
    const Row* row = nullptr;
    if (it != tables_.end()) {
      if (const auto found = it->second.find(ids[k]); found != it->second.end()) row = &found->second;
    }
    if (row == nullptr) throw Error(fmt::format("row cache: row {} of table {} was never pulled", ids[k], table));
    std::copy(row->values.begin(), row->values.end(), out.begin() + static_cast<std::ptrdiff_t>(k * d));
  }
}

void RowCache::retainOnly(uint32_t table, std::span<const int64_t> ids) {
  const auto it = tables_.find(table);
  if (it == tables_.end()) return;
  const std::unordered_set<int64_t> keep(ids.begin(), ids.end());
  std::erase_if(it->second, [&keep](const auto& entry) { return !keep.contains(entry.first); });
}

size_t RowCache::rows() const {
  size_t n = 0;
  for (const auto& [table, rows] : tables_) n += rows.size();
  return n;
}

size_t RowCache::bytes() const {
  size_t n = 0;
  for (const auto& [table, rows] : tables_) n += rows.size() * dim(table) * sizeof(float);
  return n;
}

}  // namespace tandem::ps
