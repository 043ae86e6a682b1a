#pragma once
// How stale the pushes a server applied were: for each async or
// bounded-staleness push, the updates its chunk took between its worker's
// pull and the push's apply (what --staleness-lr divides the rate by).
// Counted from the apply threads at once, so atomic. Torch-free.
#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <cstdint>

namespace tandem::ps {

class StalenessCounts {
 public:
  // Staleness 0..kLast counts exactly; more counts as kLast + 1 ("more").
  static constexpr uint64_t kLast = 255;

  void record(uint64_t staleness);

  struct Summary {
    uint64_t pushes = 0;
    double mean = 0;   // over exact counts, "more" counted as kLast + 1
    uint64_t p50 = 0;  // the least staleness at or below which half the pushes were
    uint64_t p99 = 0;
    uint64_t max = 0;  // kLast + 1 when some went beyond kLast
  };
  Summary summary() const;

 private:
  std::array<std::atomic<uint64_t>, kLast + 2> counts_{};
};

nlohmann::json toJson(const StalenessCounts::Summary& s);

}  // namespace tandem::ps
