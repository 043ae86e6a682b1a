#include "ps/embedding_store.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace tandem::ps {

void EmbeddingStore::declare(const RowTableOptions& spec) {
  const auto it = tables_.find(spec.table);
  if (it == tables_.end()) {
    tables_.emplace(spec.table, std::make_unique<RowTable>(spec));
    return;
  }
  const RowTableOptions& held = it->second->options();
  auto differs = [&](const char* what, const auto& here, const auto& given) {
    if (here == given) return;
    throw InputError(fmt::format("{}: {} {} in this declaration, {} on the server", held.name, what, given, here));
  };
  differs("dimension", held.dim, spec.dim);
  differs("rows", held.num_rows, spec.num_rows);
  differs("optimizer", optim::sparseOptimizerName(held.optimizer.rule), optim::sparseOptimizerName(spec.optimizer.rule));
  differs("seed", held.seed, spec.seed);
  differs("initial scale", held.init_scale, spec.init_scale);
}

RowTable& EmbeddingStore::find(uint32_t table) {
  const auto it = tables_.find(table);
  if (it == tables_.end()) throw InputError(fmt::format("embedding table {} was never declared", table));
  return *it->second;
}

const RowTable& EmbeddingStore::table(uint32_t id) const {
  const auto it = tables_.find(id);
  TANDEM_ENFORCE(it != tables_.end(), "embedding table {} was never declared", id);
  return *it->second;
}

RowPullReply EmbeddingStore::pull(uint32_t table, std::span<const int64_t> ids, std::span<const uint32_t> held) {
  RowTable& rows = find(table);
  enforceEq(held.size(), ids.size(), "row pull: versions held");
  std::vector<int64_t> wanted;
  RowPullReply reply;
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint32_t now = rows.version(ids[k]);
    if (now != 0 && now == held[k]) continue;  // the worker's copy is the server's
    reply.positions.push_back(static_cast<uint32_t>(k));
    wanted.push_back(ids[k]);
  }
  reply.values.resize(wanted.size() * rows.options().dim);
  reply.versions.resize(wanted.size());
  rows.pull(wanted, reply.values, reply.versions);  // makes new rows: their versions are 1 from here
  return reply;
}

void EmbeddingStore::push(int worker, uint32_t table, std::span<const int64_t> ids, std::span<const float> grads,
                          double lr) {
  RowTable& rows = find(table);
  if (!sync_) {
    rows.apply(ids, grads, lr);
    return;
  }
  rows.checkPush(ids, grads);  // named now, not at the step's end
  Pushed& mine = pending_[table][worker];
  if (!mine.ids.empty()) {
    throw InputError(fmt::format("{}: worker {} pushed twice in one step", rows.options().name, worker));
  }
  mine.ids.assign(ids.begin(), ids.end());
  mine.grads.assign(grads.begin(), grads.end());
}

void EmbeddingStore::endStep(double lr) {
  for (auto& [table, by_worker] : pending_) {
    RowTable& rows = find(table);
    // The workers' rows one after another in worker order (the map's), so
    // sumByRow adds each row's gradients in that order whoever came first.
    std::vector<int64_t> ids;
    std::vector<float> grads;
    for (const auto& [worker, pushed] : by_worker) {
      ids.insert(ids.end(), pushed.ids.begin(), pushed.ids.end());
      grads.insert(grads.end(), pushed.grads.begin(), pushed.grads.end());
    }
    const UniqueRows unique = uniqueRows(ids);
    std::vector<float> summed(unique.ids.size() * rows.options().dim);
    sumByRow(unique, grads, rows.options().dim, summed);
    rows.apply(unique.ids, summed, lr);
  }
  pending_.clear();
}

size_t EmbeddingStore::bytes() const {
  size_t total = 0;
  for (const auto& [id, table] : tables_) total += table->bytes();
  return total;
}

}  // namespace tandem::ps
