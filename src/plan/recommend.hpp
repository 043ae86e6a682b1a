#pragma once
// "What should I change?": the layout and bucket or chunk size, among those
// Tandem runs today, that the planner predicts fastest for a workload on a
// cluster. Torch-free.
#include "plan/comm_model.hpp"

namespace tandem::plan {

struct Recommendation {
  Layout layout;
  double group_bytes = 0;  // bucket (all-reduce) or chunk (PS) size
  Prediction prediction;   // Tandem's predicted path with them
};

// Tries ring all-reduce and a server on every host (colocated: no hosts
// beyond the cluster's), each with groups of 1/4 to 64 MiB, under `costs`
// (its group size is ignored). Of those within 1% of the most samples/s it
// keeps the first: all-reduce before servers, larger groups (fewer
// messages) before smaller.
Recommendation recommend(const Workload& work, const Cluster& cluster, const TandemPath& costs);

}  // namespace tandem::plan
