#include "ps/staleness_counts.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace tandem::ps {

void StalenessCounts::record(uint64_t staleness) {
  const uint64_t k = std::min(staleness, kLast + 1);
  counts_[k].fetch_add(1, std::memory_order_relaxed);
  total_.fetch_add(k, std::memory_order_relaxed);
  pushes_.fetch_add(1, std::memory_order_relaxed);
}

double StalenessCounts::mean() const {
  const uint64_t pushes = pushes_.load(std::memory_order_relaxed);
  return pushes == 0 ? 0.0 : static_cast<double>(total_.load(std::memory_order_relaxed)) / static_cast<double>(pushes);
}

double correctedMomentum(double momentum, double mean_staleness) {
  return std::max(0.0, 1.0 - (1.0 - momentum) * (1.0 + mean_staleness));
}

namespace {

bool adamLike(const optim::OptimizerSettings& settings) { return settings.name == "adam" || settings.name == "adamw"; }

}  // namespace

const char* momentumSettingName(const optim::OptimizerSettings& settings) {
  return adamLike(settings) ? "beta1" : "momentum";
}

double& momentumSetting(optim::OptimizerSettings& settings) {
  return adamLike(settings) ? settings.beta1 : settings.momentum;
}

void correctForStaleness(optim::OptimizerSettings& settings, double mean_staleness) {
  double& momentum = momentumSetting(settings);
  momentum = correctedMomentum(momentum, mean_staleness);
}

StalenessCounts::Summary StalenessCounts::summary() const {
  Summary s;
  std::array<uint64_t, kLast + 2> counts{};
  double total = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    counts[k] = counts_[k].load(std::memory_order_relaxed);
    s.pushes += counts[k];
    total += static_cast<double>(k) * static_cast<double>(counts[k]);
    if (counts[k] > 0) s.max = k;
  }
  if (s.pushes == 0) return s;
  s.mean = total / static_cast<double>(s.pushes);
  // The smallest k whose cumulative count reaches the quantile's share.
  auto quantile = [&](double q) {
    const double wanted = q * static_cast<double>(s.pushes);
    uint64_t seen = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      seen += counts[k];
      if (static_cast<double>(seen) >= wanted) return static_cast<uint64_t>(k);
    }
    return s.max;
  };
  s.p50 = quantile(0.5);
  s.p99 = quantile(0.99);
  return s;
}

std::string describeStaleness(const nlohmann::json& summary) {
  std::string text;
  if (const auto s = summary.find("push_staleness"); s != summary.end() && s->value("pushes", 0) > 0) {
    text = fmt::format("; pushes {:.2f} updates stale on average (p99 {}), each rate divided by its own",
                       s->at("mean").get<double>(), s->at("p99").get<uint64_t>());
  }
  if (const auto m = summary.find("momentum_correction"); m != summary.end()) {
    text += fmt::format("; {} {} acts as {:.3f} at mean staleness {:.2f}", m->at("setting").get<std::string>(),
                        m->at("given").get<double>(), m->at("applied").get<double>(),
                        m->at("mean_staleness").get<double>());
  }
  return text;
}

nlohmann::json toJson(const StalenessCounts::Summary& s) {
  return {{"pushes", s.pushes}, {"mean", s.mean}, {"p50", s.p50}, {"p99", s.p99}, {"max", s.max}};
}

}  // namespace tandem::ps
