#include "cluster/kv_store.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace tandem::cluster {

PrefixStore::PrefixStore(std::string prefix, KeyValueStore& base) : prefix_(std::move(prefix)), base_(base) {}

void PrefixStore::set(const std::string& key, const std::vector<char>& data) { base_.set(joined(key), data); }

std::vector<char> PrefixStore::get(const std::string& key) { return base_.get(joined(key)); }

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(joined(key));
  base_.wait(full, timeout);
}

void MemoryStore::set(const std::string& key, const std::vector<char>& data) {
  {
    std::lock_guard lock(mutex_);
    values_[key] = data;
  }
  changed_.notify_all();
}

std::vector<char> MemoryStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard lock(mutex_);
  return values_.at(key);
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& key : keys) {
      if (!values_.contains(key)) out.push_back(key);
    }
    return out;
  };
  if (!changed_.wait_for(lock, timeout, [&] { return missing().empty(); })) {
    throw PeerError(fmt::format("in-memory store: keys [{}] still missing after {} ms", fmt::join(missing(), ", "),
                                timeout.count()));
  }
}

}  // namespace tandem::cluster
