#pragma once
// The comm-bound optimum of a data-parallel step, from first principles
// (issue 12): compute time, the bytes each link must carry for the chosen
// layout, link rate and latency, and perfect overlap of the exchange with
// backward. Torch-free: the model enters as its size.
//
// Links are full duplex, one per host (a host's NIC to the switch); traffic
// between tasks on one host never touches it and costs nothing here.
#include <cstdint>
#include <string>

namespace tandem::plan {

struct Workload {
  double forward_s = 0;   // per step, per worker
  double backward_s = 0;
  double model_bytes = 0;  // the gradient (and parameter) bytes exchanged per step (DiLoCo: per round)
  int64_t batch_per_worker = 1;
};

struct Cluster {
  int hosts = 1;
  int workers_per_host = 1;
  double link_bytes_per_s = 1.25e9;  // each host's link, each direction
  double latency_s = 0;              // one way, per message
  int workers() const { return hosts * workers_per_host; }
};

enum class Algorithm {
  kRingAllReduce,  // one flat ring over every worker, ordered host by host
  kPsColocated,    // k servers, one on each of the first k worker hosts
  kPsDedicated,    // k servers on k hosts of their own, with the same links
  // Hierarchical (issue 13, --hierarchical auto): each host first reduces
  // its workers' gradients over its internal links, then
  kHierAllReduce,   // one ring among the hosts, and a local broadcast
  kHierPsColocated, // each host pushes and pulls once, to servers as kPsColocated
  kHierPsDedicated, // ... to servers as kPsDedicated
};

// All-reduce layouts, as against parameter-server ones.
bool isAllReduce(Algorithm algorithm);

struct Layout {
  Algorithm algorithm = Algorithm::kRingAllReduce;
  int servers = 1;  // PS layouts
};

struct LinkLoad {
  double worker_host_bytes = 0;  // the busiest worker host's link, busier direction, per step
  double server_host_bytes = 0;  // dedicated servers' links, busier direction, per step (0 otherwise)
};

struct Prediction {
  LinkLoad load;
  double comm_s = 0;       // time the busiest link needs per step, plus latency
  double step_s = 0;       // forward + max(backward, comm)
  // The optimum when the next forward overlaps the exchange too (priority
  // scheduling): max(forward + backward, comm).
  double overlapped_step_s = 0;
  double single_s = 0;     // one worker alone: forward + backward
  double efficiency = 0;   // single_s / step_s: throughput per worker against one alone
  double samples_per_s = 0;  // the job's
  std::string bottleneck;  // "compute", "worker links", "server links" or (Tandem's path) "exchange after backward"
};

// Bytes per step on the busiest links. Throws InputError for a layout that
// does not fit the cluster (more colocated servers than hosts, no servers).
LinkLoad linkLoad(const Workload& work, const Cluster& cluster, const Layout& layout);

// The optimum step for the layout. Any all-reduce layout moves at least
// the hierarchical ring's bytes, 2(h-1)/h of the model per host link; a
// flat ring pays 2(n-1) latencies, a hierarchical one 2(h-1), a PS exchange
// a push and a pull; a single host has no link to wait on.
Prediction predict(const Workload& work, const Cluster& cluster, const Layout& layout);

// Tandem's own path, which the optimum leaves out: gradients leave in groups
// (all-reduce buckets, PS chunks) as backward completes them, so the last
// group's exchange starts only when backward ends; a PS chunk is also
// applied on its server and pulled back before the next forward.
struct TandemPath {
  double group_bytes = 25e6;          // bucket or chunk cap (--bucket-mb, --ps-chunk-mb)
  double apply_bytes_per_s = 0;       // a server's optimizer apply rate (0: free)
  double message_s = 0;               // fixed cost per message, beyond latency (0: none)
  bool asynchronous = false;          // async PS: workers do not wait for each other
  // Sync PS with priority scheduling (--priority on, flat layouts): the
  // next forward starts as the first chunk lands, and the exchange carries
  // on under it.
  bool priority = false;
  // Flat all-reduce buckets this large go as a ring, smaller ones
  // halving-doubling. 0: a ring for every size, which is what LibTorch's
  // Gloo (c10d) runs for Tandem since the move to LibTorch 2.x; the 1.13
  // build ran halving-doubling below 4 MiB.
  double ring_threshold_bytes = 0;
};

// The step Tandem takes on that layout: backward produces gradient bytes at
// an even rate; each group crosses the busiest link (at the optimum's cost
// per byte) once ready and once the link is free; PS groups then wait for
// their apply and cross back. The comm-bound optimum is the limit of tiny
// groups and free messages. With priority, a sync PS step is the longer of
// compute plus the first chunk's round trip after backward (the next
// forward's first stage waits for it) and the busiest link's bytes and
// messages per step (the exchange runs under the next forward). Asynchronous PS workers share the busiest link
// as a processor-sharing queue instead: step_s is then worker 0's and
// samples_per_s sums every worker's own rate.
Prediction predictTandem(const Workload& work, const Cluster& cluster, const Layout& layout, const TandemPath& path);

// DiLoCo (--local-steps h): h steps of compute, then one exchange of the
// model, after them and not overlapped. `exchange` is predict's or
// predictTandem's answer for `work` without compute (forward and backward
// 0): the exchange alone. Returns the mean step: the compute plus 1/h of
// the exchange's time, with 1/h of its bytes. overlapped_step_s is the
// step if each exchange hid behind the next round's compute (streaming).
// The bottleneck is compute when it outweighs its share of the exchange.
// Streaming DiLoCo (`fragments` > 1 or `overlap_steps` > 0): each of the
// fragments is exchanged once per h steps, taking 1/fragments of the
// exchange's time, hidden behind `overlap_steps` steps of compute; only
// what sticks out of them is added to the steps.
Prediction withLocalSteps(const Prediction& exchange, const Workload& work, const Cluster& cluster, int64_t h,
                          int64_t fragments = 1, int64_t overlap_steps = 0);

std::string algorithmName(Algorithm algorithm);
// "allreduce", "ps-colocated", "ps-dedicated"; InputError otherwise.
Algorithm parseAlgorithm(const std::string& name);

}  // namespace tandem::plan
