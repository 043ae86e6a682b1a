#pragma once
// The key-value vocabulary every rendezvous in Tandem speaks: the chief's
// coordinator store (cluster/coordinator.hpp), a prefix view of any store,
// and an in-process store for one-process jobs and tests. Collectives
// rendezvous through it (collective/communicator.cpp adapts it for torch's
// c10d), so no torch-free layer depends on Gloo's store interface.
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::cluster {

// Keys are write-once-or-overwrite byte strings. Implementations say
// whether they are thread-safe.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  // Blocks until the key exists or the store's own timeout passes
  // (PeerError naming the key).
  virtual std::vector<char> get(const std::string& key) = 0;
  // Blocks until every key exists or `timeout` passes (PeerError naming
  // the keys still missing).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // The timeout get() waits for.
  virtual std::chrono::milliseconds timeout() const = 0;
};

// Every key of `base` under "prefix/": several meshes share one store.
// As thread-safe as `base`, which must outlive it.
class PrefixStore final : public KeyValueStore {
 public:
  PrefixStore(std::string prefix, KeyValueStore& base);
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::chrono::milliseconds timeout() const override { return base_.timeout(); }

 private:
  std::string joined(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  KeyValueStore& base_;
};

// A store in this process's memory, for ranks that are threads of one
// process (tests, benchmarks). Thread-safe.
class MemoryStore final : public KeyValueStore {
 public:
  explicit MemoryStore(std::chrono::milliseconds timeout = std::chrono::seconds(30)) : timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::chrono::milliseconds timeout() const override { return timeout_; }

 private:
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
};

}  // namespace tandem::cluster
