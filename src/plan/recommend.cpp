#include "plan/recommend.hpp"

#include <algorithm>
#include <vector>

namespace tandem::plan {

Recommendation recommend(const Workload& work, const Cluster& cluster, const TandemPath& costs) {
  const Layout candidates[] = {{Algorithm::kRingAllReduce, 0}, {Algorithm::kPsColocated, cluster.hosts}};
  std::vector<Recommendation> tried;
  double fastest = 0;
  for (const Layout& layout : candidates) {
    for (double mib = 64; mib >= 0.25; mib /= 2) {
      TandemPath path = costs;
      path.group_bytes = mib * 1024 * 1024;
      path.priority = costs.priority && layout.algorithm == Algorithm::kPsColocated;  // its forward may overlap
      tried.push_back({layout, path.group_bytes, predictTandem(work, cluster, layout, path)});
      fastest = std::max(fastest, tried.back().prediction.samples_per_s);
    }
  }
  // Within 1% counts as equal: the simpler layout, or fewer messages, wins.
  for (const auto& r : tried) {
    if (r.prediction.samples_per_s >= 0.99 * fastest) return r;
  }
  return tried.front();
}

}  // namespace tandem::plan
