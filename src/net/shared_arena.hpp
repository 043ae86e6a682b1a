#pragma once
// Shared memory between a worker and the servers on its host, so that bulk
// payloads (pushed gradients, pulled values) cross without the kernel's two
// socket copies. The worker creates the arena (an anonymous memfd, gone when
// the last process that maps it exits, so nothing is left behind by a kill);
// a server on the same host opens it through /proc/<pid>/fd/<fd>, which only
// a process of the same user may do, and proves it opened the right one by
// the random token the worker wrote at its start. A frame whose payload
// lives in the arena carries only an ArenaRef (frame.hpp, kFlagInArena).
//
// Everything a peer says about an arena (its handle, every ref) is
// untrusted: open() and slice() check it and throw InputError naming the
// peer. Thread-safe after construction (the mapping never moves).
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace tandem::net {

// How a server finds a worker's arena.
struct ArenaHandle {
  uint32_t pid = 0;
  int32_t fd = -1;
  uint64_t bytes = 0;  // the usable region, after the token page
  std::array<uint8_t, 16> token{};
  bool operator==(const ArenaHandle&) const = default;
};

// Where a payload lies in the worker's arena: [offset, offset + bytes).
struct ArenaRef {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool operator==(const ArenaRef&) const = default;
};
inline constexpr size_t kArenaRefBytes = 16;
std::vector<char> encode(const ArenaRef& ref);
// Throws InputError naming `peer` unless `payload` is exactly one ref.
ArenaRef decodeArenaRef(std::span<const std::byte> payload, std::string_view peer);

class SharedArena {
 public:
  // A new arena of `bytes` usable bytes (zeroed). Throws Error when the
  // system refuses (no memfd, no memory).
  static std::shared_ptr<SharedArena> create(size_t bytes);
  // Maps the arena `handle` names, owned by `peer`. Throws InputError when
  // it cannot be opened (another user's, another pid namespace, gone), has
  // another size, or holds another token.
  static std::shared_ptr<SharedArena> open(const ArenaHandle& handle, std::string_view peer);

  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  const ArenaHandle& handle() const { return handle_; }
  std::byte* data() const { return base_; }
  size_t size() const { return handle_.bytes; }
  bool contains(const void* data, size_t bytes) const;
  uint64_t offsetOf(const void* data) const;  // contains() first
  // The arena's bytes `ref` names, checked to lie inside it and to hold no
  // more than `most` bytes. Throws InputError naming `peer` otherwise.
  std::span<std::byte> slice(const ArenaRef& ref, size_t most, std::string_view peer) const;

 private:
  SharedArena(int fd, std::byte* mapping, size_t mapped, ArenaHandle handle);

  int fd_;
  std::byte* mapping_;  // token page, then the usable region
  size_t mapped_;
  std::byte* base_;
  ArenaHandle handle_;
};

}  // namespace tandem::net
