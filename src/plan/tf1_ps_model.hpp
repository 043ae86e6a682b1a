#pragma once
// The layout the users ran under TensorFlow 1 (issue 12, "tf1-ps"): one PS
// task per host, each holding whole variables placed round-robin in creation
// order (replica_device_setter's default); every worker pushes every
// gradient and pulls every variable through gRPC each step, with no local
// aggregation and no overlap with backward. Torch-free: the model enters as
// its variables' sizes, in creation order.
#include <string>
#include <vector>

#include "plan/comm_model.hpp"

namespace tandem::plan {

// replica_device_setter's default, and tf_cnn_benchmarks' least-loaded PS.
enum class VariablePlacement { kRoundRobin, kGreedyBySize };

// Throughputs of TF1's gRPC path, which the link rate does not bound.
struct Tf1PsCosts {
  double worker_bytes_per_s = 122e6;  // one worker's push + pull stream
  double server_bytes_per_s = 372e6;  // one PS process, bytes in plus out
  double message_s = 0;               // a PS's cost per variable per worker and direction
  VariablePlacement placement = VariablePlacement::kRoundRobin;
};

struct Tf1PsPrediction {
  double step_s = 0;
  double comm_s = 0;                  // exchange time after backward
  double samples_per_s = 0;
  double efficiency = 0;              // against forward + backward alone
  double busiest_server_share = 0;    // of the model's bytes, on the fullest PS
  std::string bottleneck;             // "worker stream", "busiest PS" or "links"
};

// Which PS holds each variable: round-robin over `servers`, `first_slot`
// already taken (TF scripts usually create global_step before the model).
std::vector<int> roundRobinPlacement(size_t variables, int servers, int first_slot = 1);
// Each variable, in creation order, on the PS holding the fewest bytes so far.
std::vector<int> greedyPlacement(const std::vector<double>& variable_bytes, int servers);

// Throws InputError for an empty variable list or non-positive rates.
Tf1PsPrediction predictTf1Ps(const Workload& work, const Cluster& cluster, const std::vector<double>& variable_bytes,
                             const Tf1PsCosts& costs);

}  // namespace tandem::plan
