#pragma once
// Shared by the collective tests: each rank's options, and contributions
// whose sums are exact whatever order the ranks add in.
#include <chrono>
#include <cstddef>

#include "collective/communicator.hpp"

namespace tandem::collective::testing {

inline CommunicatorOptions optionsFor(int rank, int size,
                                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  CommunicatorOptions options;
  options.rank = rank;
  options.size = size;
  options.timeout = timeout;
  return options;
}

// Small integers: every partial sum of up to 13 ranks is exact in float (and
// in fp16 and bf16, below 256); they vary with the index so misplaced
// chunks show.
inline float contribution(int rank, size_t i) { return static_cast<float>(static_cast<int>(i % 7) + 2 * rank); }
inline float expectedSum(int size, size_t i) {
  return static_cast<float>(size * static_cast<int>(i % 7) + size * (size - 1));
}

}  // namespace tandem::collective::testing
