#pragma once
// How stale the pushes a server applied were: for each async or
// bounded-staleness push, the updates its chunk took between its worker's
// pull and the push's apply (what --staleness-lr divides the rate by).
// Counted from the apply threads at once, so atomic. Torch-free.
#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "optim/kernels.hpp"

namespace tandem::ps {

class StalenessCounts {
 public:
  // Staleness 0..kLast counts exactly; more counts as kLast + 1 ("more").
  static constexpr uint64_t kLast = 255;

  void record(uint64_t staleness);
  // The mean so far, in O(1) (the apply path asks on every push).
  double mean() const;

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
  std::atomic<uint64_t> pushes_{0};
  std::atomic<uint64_t> total_{0};  // the sum of every push's staleness, "more" as kLast + 1
};

// The explicit momentum that, with the momentum asynchrony adds, acts as
// `momentum` did without it. Staleness with mean s, geometrically spread,
// acts as momentum s / (1 + s) (Mitliagkas et al., 2016, "Asynchrony
// begets momentum"); two momenta in series keep (1 - a)(1 - b) of each
// step, so the explicit one keeps (1 - momentum)(1 + s): 0.9 at s = 2.95
// becomes 0.605. Never below 0.
double correctedMomentum(double momentum, double mean_staleness);
// The setting that is the optimizer's momentum: SGD's and RMSprop's
// momentum, Adam's and AdamW's beta1 ("momentum" or "beta1").
const char* momentumSettingName(const optim::OptimizerSettings& settings);
double& momentumSetting(optim::OptimizerSettings& settings);
// `settings` with that momentum corrected so.
void correctForStaleness(optim::OptimizerSettings& settings, double mean_staleness);

nlohmann::json toJson(const StalenessCounts::Summary& s);

// What a server's summary (its push_staleness and momentum_correction)
// says was applied, for its log: "; pushes 2.95 updates stale on average
// (p99 7), each rate divided by its own; momentum 0.9 acts as 0.605 at
// mean staleness 2.95". Empty without either.
std::string describeStaleness(const nlohmann::json& summary);

}  // namespace tandem::ps
