#include "bench/allreduce_bench.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"

namespace tandem::bench {

namespace {

size_t parseOneSize(const std::string& text) {
  size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw InputError(fmt::format("--sizes: '{}' is not a size like 4K, 1M or 256M", text));
  }
  std::string suffix = text.substr(pos);
  size_t multiplier = 1;
  if (suffix == "K" || suffix == "k") multiplier = size_t{1} << 10;
  else if (suffix == "M" || suffix == "m") multiplier = size_t{1} << 20;
  else if (suffix == "G" || suffix == "g") multiplier = size_t{1} << 30;
  else if (!suffix.empty() && suffix != "B") throw InputError(fmt::format("--sizes: unknown suffix in '{}'", text));
  size_t bytes = static_cast<size_t>(value) * multiplier;
  if (bytes == 0 || bytes % sizeof(float) != 0) {
    throw InputError(fmt::format("--sizes: '{}' must be a positive multiple of 4 bytes", text));
  }
  return bytes;
}

int iterationsFor(size_t bytes) {
  const size_t budget = size_t{512} << 20;  // about this many bytes reduced per size
  return static_cast<int>(std::clamp<size_t>(budget / bytes, 5, 1000));
}

}  // namespace

// Small integers, so every partial sum is exact in float and the total is
// (i % 7 + 1) * n(n+1)/2.
void fillAllreducePattern(float* data, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

std::string allreduceMismatch(const float* data, size_t count, int ranks) {
  const int factor = ranks * (ranks + 1) / 2;
  for (size_t i = 0; i < count; ++i) {
    const float expected = static_cast<float>(static_cast<int>(i % 7 + 1) * factor);
    if (data[i] != expected) return fmt::format("element {} is {}, expected {}", i, data[i], expected);
  }
  return "";
}

std::vector<size_t> parseByteSizes(const std::string& text) {
  std::vector<size_t> sizes;
  if (auto dots = text.find(".."); dots != std::string::npos) {
    size_t lo = parseOneSize(text.substr(0, dots));
    size_t hi = parseOneSize(text.substr(dots + 2));
    if (lo > hi) throw InputError(fmt::format("--sizes: '{}' runs backwards", text));
    for (size_t s = lo; s <= hi; s *= 4) sizes.push_back(s);
    return sizes;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    sizes.push_back(parseOneSize(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return sizes;
}

std::vector<AllreduceBenchRow> runAllreduceBench(collective::Communicator& comm, const std::vector<size_t>& sizes) {
  const int n = comm.size();
  const int rank = comm.rank();
  std::vector<AllreduceBenchRow> rows;
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> data(count);
    AllreduceBenchRow row;
    row.bytes = bytes;
    row.iterations = iterationsFor(bytes);
    // Keeps the first wrong result this rank saw.
    auto check = [&](const char* when) {
      if (!row.mismatch.empty()) return;
      if (std::string wrong = allreduceMismatch(data.data(), count, n); !wrong.empty()) {
        row.mismatch = fmt::format("wrong {} on rank {}: {}", when, rank, wrong);
      }
    };
    fillAllreducePattern(data.data(), count, rank);
    comm.allreduceSum(data.data(), count);  // also warms up the cached algorithm
    check("on the first call");

    // Timed iterations run on zeros so repeated sums stay finite and exact.
    std::fill(data.begin(), data.end(), 0.0f);
    comm.barrier();
    Stopwatch watch;
    for (int it = 0; it < row.iterations; ++it) comm.allreduceSum(data.data(), count);
    double mine = watch.elapsed() / row.iterations;
    std::vector<double> all(static_cast<size_t>(n));
    comm.allgather(&mine, all.data(), sizeof(double));
    row.seconds = *std::max_element(all.begin(), all.end());

    fillAllreducePattern(data.data(), count, rank);
    comm.allreduceSum(data.data(), count);
    check("after the timed iterations");
    // Every rank reports the same row: exact only if it was exact everywhere.
    const int32_t mine_exact = row.mismatch.empty() ? 1 : 0;
    std::vector<int32_t> exact_on(static_cast<size_t>(n));
    comm.allgather(&mine_exact, exact_on.data(), sizeof(int32_t));
    row.exact = std::find(exact_on.begin(), exact_on.end(), 0) == exact_on.end();
    if (!row.exact && row.mismatch.empty()) row.mismatch = "wrong on another rank";
    row.algbw_gbps = static_cast<double>(bytes) / row.seconds / 1e9;
    row.busbw_gbps = row.algbw_gbps * 2.0 * (n - 1) / n;
    rows.push_back(row);
  }
  return rows;
}

double measureLoopbackTcpGbps(size_t bytes) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (listener >= 0) ::close(listener);
    throw Error("loopback TCP measurement: cannot listen on 127.0.0.1");
  }
  constexpr size_t kChunk = size_t{1} << 20;
  std::thread receiver([listener, bytes] {
    int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    std::vector<char> buffer(kChunk);
    size_t got = 0;
    while (got < bytes) {
      ssize_t r = ::recv(fd, buffer.data(), buffer.size(), 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    ::close(fd);
  });
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  double seconds = 0;
  bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (ok) {
    std::vector<char> buffer(kChunk, 1);
    Stopwatch watch;
    size_t sent = 0;
    while (ok && sent < bytes) {
      ssize_t w = ::send(fd, buffer.data(), std::min(kChunk, bytes - sent), 0);
      ok = w > 0;
      if (ok) sent += static_cast<size_t>(w);
    }
    ::shutdown(fd, SHUT_WR);
    receiver.join();  // the receiver has everything only when it returns
    seconds = watch.elapsed();
  } else {
    ::shutdown(listener, SHUT_RDWR);
    receiver.join();
  }
  if (fd >= 0) ::close(fd);
  ::close(listener);
  if (!ok || seconds <= 0) throw Error("loopback TCP measurement failed");
  return static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace tandem::bench
