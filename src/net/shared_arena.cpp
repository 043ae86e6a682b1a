#include "net/shared_arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/error.hpp"
#include "net/wire.hpp"

namespace tandem::net {
namespace {

// The token sits alone on the first page, so the usable region is
// page-aligned (any tensor may live there).
constexpr size_t kTokenPage = 4096;

std::array<uint8_t, 16> randomToken() {
  std::random_device random;
  std::array<uint8_t, 16> token{};
  for (size_t i = 0; i < token.size(); i += 4) {
    const uint32_t bits = random();
    std::memcpy(token.data() + i, &bits, 4);
  }
  return token;
}

std::byte* mapShared(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

}  // namespace

std::vector<char> encode(const ArenaRef& ref) {
  PayloadWriter w;
  w.putU64(ref.offset);
  w.putU64(ref.bytes);
  return w.take();
}

ArenaRef decodeArenaRef(std::span<const std::byte> payload, std::string_view peer) {
  PayloadReader r(payload, peer, "shared-memory reference");
  ArenaRef ref;
  ref.offset = r.u64("offset");
  ref.bytes = r.u64("bytes");
  r.expectEnd();
  return ref;
}

std::shared_ptr<SharedArena> SharedArena::create(size_t bytes) {
  const int fd = ::memfd_create("tandem-arena", MFD_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("shared memory: memfd_create failed: {}", std::strerror(errno)));
  const size_t mapped = kTokenPage + bytes;
  std::byte* mapping = nullptr;
  if (::ftruncate(fd, static_cast<off_t>(mapped)) != 0 || (mapping = mapShared(fd, mapped)) == nullptr) {
    const int e = errno;
    ::close(fd);
    throw Error(fmt::format("shared memory: cannot make {} bytes: {}", mapped, std::strerror(e)));
  }
  ArenaHandle handle{static_cast<uint32_t>(::getpid()), fd, bytes, randomToken()};
  std::memcpy(mapping, handle.token.data(), handle.token.size());
  return std::shared_ptr<SharedArena>(new SharedArena(fd, mapping, mapped, handle));
}

std::shared_ptr<SharedArena> SharedArena::open(const ArenaHandle& handle, std::string_view peer) {
  const std::string path = fmt::format("/proc/{}/fd/{}", handle.pid, handle.fd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    throw InputError(fmt::format("{}'s shared memory ({}) cannot be opened here: {}", peer, path, std::strerror(errno)));
  }
  struct stat st {};
  const size_t mapped = kTokenPage + handle.bytes;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || handle.bytes > SIZE_MAX - kTokenPage ||
      static_cast<uint64_t>(st.st_size) != mapped) {
    ::close(fd);
    throw InputError(fmt::format("{}'s shared memory ({}) is not the {} bytes it announced", peer, path, handle.bytes));
  }
  std::byte* mapping = mapShared(fd, mapped);
  if (mapping == nullptr) {
    const int e = errno;
    ::close(fd);
    throw InputError(fmt::format("{}'s shared memory ({}) cannot be mapped: {}", peer, path, std::strerror(e)));
  }
  if (std::memcmp(mapping, handle.token.data(), handle.token.size()) != 0) {
    ::munmap(mapping, mapped);
    ::close(fd);
    throw InputError(fmt::format("{}'s shared memory ({}) holds another token: not the arena it announced", peer, path));
  }
  return std::shared_ptr<SharedArena>(new SharedArena(fd, mapping, mapped, handle));
}

SharedArena::SharedArena(int fd, std::byte* mapping, size_t mapped, ArenaHandle handle)
    : fd_(fd), mapping_(mapping), mapped_(mapped), base_(mapping + kTokenPage), handle_(handle) {}

SharedArena::~SharedArena() {
  ::munmap(mapping_, mapped_);
  ::close(fd_);
}

bool SharedArena::contains(const void* data, size_t bytes) const {
  const auto* p = static_cast<const std::byte*>(data);
  return p >= base_ && bytes <= size() && static_cast<size_t>(p - base_) <= size() - bytes;
}

uint64_t SharedArena::offsetOf(const void* data) const {
  return static_cast<uint64_t>(static_cast<const std::byte*>(data) - base_);
}

std::span<std::byte> SharedArena::slice(const ArenaRef& ref, size_t most, std::string_view peer) const {
  if (ref.bytes > most || ref.offset > size() || ref.bytes > size() - ref.offset) {
    throw InputError(fmt::format("{} named {} bytes at offset {} of its {}-byte shared memory (at most {} expected)",
                                 peer, ref.bytes, ref.offset, size(), most));
  }
  return {base_ + ref.offset, static_cast<size_t>(ref.bytes)};
}

}  // namespace tandem::net
