#pragma once
// How fast one core applies the server-side optimizers, next to memcpy
// measured in the same run: `tandem bench ps-apply`. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::bench {

struct ApplyBenchRow {
  std::string kernel;    // "memcpy", "sgd-momentum", "adam", "sum of 4 gradients"
  double seconds = 0;    // per pass over the buffer
  double gbps = 0;       // gradient bytes applied (memcpy: bytes copied) per second
  double vs_memcpy = 0;  // gbps / memcpy's gbps
};

// Runs each kernel over `floats` floats on the calling thread until
// `min_seconds` have passed (best pass kept). Throws InputError for floats < 1.
std::vector<ApplyBenchRow> runApplyBench(int64_t floats, double min_seconds);

}  // namespace tandem::bench
