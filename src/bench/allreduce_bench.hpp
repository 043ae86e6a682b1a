#pragma once
// The all-reduce benchmark behind `tandem bench allreduce`, in the style of
// nccl-tests: data chosen so the sum is exact and checked, bandwidth as
// algbw and busbw, next to the link's measured single-stream peak.
// Torch-free.
#include <cstddef>
#include <string>
#include <vector>

#include "collective/communicator.hpp"

namespace tandem::bench {

struct AllreduceBenchRow {
  size_t bytes = 0;
  int iterations = 0;
  double seconds = 0;        // per all-reduce, slowest rank
  double algbw_gbps = 0;     // bytes / seconds, GB/s
  double busbw_gbps = 0;     // algbw * 2(n-1)/n
  // Every element on every rank matched the expected sum, on the first call
  // and again after the timed iterations.
  bool exact = false;
  std::string mismatch;  // when not exact: this rank's first wrong element, or "on another rank"
};

// "4K..256M" -> 4K, 16K, ..., 256M (x4 steps); "1M" -> {1M}; "64K,1M" ->
// both. Suffixes K, M, G are powers of 1024. Throws InputError naming
// --sizes for anything else (sizes must be a positive multiple of 4 bytes).
std::vector<size_t> parseByteSizes(const std::string& text);

// Runs every size on `comm` (every rank must call this with the same sizes);
// the result is the same on every rank, `exact` included (the ranks agree on
// it). A wrong sum does not throw: its row says exact = false and names the
// element, and the remaining sizes still run.
std::vector<AllreduceBenchRow> runAllreduceBench(collective::Communicator& comm, const std::vector<size_t>& sizes);

// The benchmark's data, chosen so that every sum is exact in float: rank r
// holds (r + 1) * (i % 7 + 1) at element i.
void fillAllreducePattern(float* data, size_t count, int rank);

// Compares `data` with the exact sum of the pattern over `ranks` ranks.
// Empty when every element matches; otherwise names the first wrong
// element with its value and the expected one.
std::string allreduceMismatch(const float* data, size_t count, int ranks);

// Single-stream TCP throughput over loopback, GB/s: one thread sends
// `bytes` to another through 127.0.0.1.
double measureLoopbackTcpGbps(size_t bytes = size_t{1} << 30);

}  // namespace tandem::bench
