#pragma once
// Counter-based randomness for the data layer. Every random choice (epoch
// order, augmentation, synthetic samples) is a pure function of a seed and
// an index, so results never depend on which thread did the work or on the
// standard library's distribution implementations.
#include <cstdint>

namespace tandem::data {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Order-sensitive, so mixSeed(a, b) and mixSeed(b, a) differ.
inline uint64_t mixSeed(uint64_t a, uint64_t b) { return splitmix64(splitmix64(a) ^ b); }

inline uint64_t mixSeed(uint64_t a, uint64_t b, uint64_t c) { return mixSeed(mixSeed(a, b), c); }

// Uniform float in [0, 1) from the top 24 bits, exact in float32.
inline float unitFloat(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

}  // namespace tandem::data
