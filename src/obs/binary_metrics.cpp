#include "obs/binary_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.hpp"

namespace tandem::obs {

double rocAuc(std::span<const float> scores, std::span<const float> labels) {
  if (scores.size() != labels.size()) {
    throw InputError(fmt::format("AUC: {} scores for {} labels", scores.size(), labels.size()));
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U: the positives' ranks (ties share their mean rank).
  double positive_ranks = 0;
  double positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positive_ranks += mean_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) {
    throw InputError(fmt::format("AUC: the labels hold {} positive(s) and {} negative(s); it needs both",
                                 positives, negatives));
  }
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

double logLoss(std::span<const float> p, std::span<const float> labels) {
  if (p.size() != labels.size() || p.empty()) {
    throw InputError(fmt::format("log loss: {} probabilities for {} labels", p.size(), labels.size()));
  }
  constexpr double kEps = 1e-7;
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::clamp(static_cast<double>(p[i]), kEps, 1 - kEps);
    total -= labels[i] > 0.5f ? std::log(q) : std::log(1 - q);
  }
  return total / static_cast<double>(p.size());
}

}  // namespace tandem::obs
