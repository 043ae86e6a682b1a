#include "plan/comm_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace tandem::plan {

bool isAllReduce(Algorithm algorithm) {
  return algorithm == Algorithm::kRingAllReduce || algorithm == Algorithm::kHierAllReduce;
}

namespace {

// A hierarchical layout is its flat layout with one worker per host: the
// host's own reduction and broadcast stay on its internal links.
Algorithm flatOf(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kHierAllReduce: return Algorithm::kRingAllReduce;
    case Algorithm::kHierPsColocated: return Algorithm::kPsColocated;
    case Algorithm::kHierPsDedicated: return Algorithm::kPsDedicated;
    default: return algorithm;
  }
}

// One-way latencies a group's exchange pays: a ring's 2(n-1) steps (among
// hosts when hierarchical), or a PS push and pull.
double latenciesPerGroup(const Cluster& cluster, const Layout& layout) {
  if (!isAllReduce(layout.algorithm)) return 2.0;
  const int ring = layout.algorithm == Algorithm::kHierAllReduce ? cluster.hosts : cluster.workers();
  return 2.0 * (ring - 1);
}

std::string linkBottleneck(const LinkLoad& load) {
  return load.server_host_bytes > load.worker_host_bytes ? "server links" : "worker links";
}

}  // namespace

LinkLoad linkLoad(const Workload& work, const Cluster& cluster, const Layout& layout) {
  if (flatOf(layout.algorithm) != layout.algorithm) {
    Cluster one_per_host = cluster;
    one_per_host.workers_per_host = 1;
    return linkLoad(work, one_per_host, {flatOf(layout.algorithm), layout.servers});
  }
  if (cluster.hosts < 1 || cluster.workers_per_host < 1) {
    throw InputError(fmt::format("a cluster needs at least 1 host and 1 worker per host, got {} x {}", cluster.hosts,
                                 cluster.workers_per_host));
  }
  const double s = work.model_bytes;
  const double n = cluster.workers();
  const double g = cluster.workers_per_host;
  const double h = cluster.hosts;
  LinkLoad load;
  switch (layout.algorithm) {
    case Algorithm::kRingAllReduce:
      // Ordered host by host, a ring crosses each host's link once each way,
      // and every ring edge carries 2(n-1)/n of the model.
      load.worker_host_bytes = cluster.hosts > 1 ? 2 * (n - 1) / n * s : 0;
      break;
    case Algorithm::kPsColocated: {
      if (layout.servers < 1 || layout.servers > cluster.hosts) {
        throw InputError(fmt::format("{} colocated server(s) on {} host(s): put at most one on each host",
                                     layout.servers, cluster.hosts));
      }
      // Each server holds 1/k. A server host sends its share to the workers
      // of the other hosts, and its workers push the shares held elsewhere.
      const double k = layout.servers;
      const double served_remote = (n - g) * s / k;   // a server host's outbound pulls
      const double pushed_remote = g * s * (k - 1) / k;  // its workers' pushes to other servers
      const double server_host = served_remote + pushed_remote;
      const double plain_host = g * s;  // a host without a server pushes (and pulls) everything
      load.worker_host_bytes = cluster.hosts == 1 ? 0 : std::max(server_host, k < h ? plain_host : 0.0);
      break;
    }
    case Algorithm::kPsDedicated:
      if (layout.servers < 1) throw InputError("a parameter-server layout needs at least 1 server");
      load.worker_host_bytes = g * s;                       // every worker pushes and pulls the whole model
      load.server_host_bytes = n * s / layout.servers;      // each server: every worker's share of it
      break;
    default:
      break;  // hierarchical: handled above
  }
  return load;
}

Prediction predict(const Workload& work, const Cluster& cluster, const Layout& layout) {
  if (!(cluster.link_bytes_per_s > 0)) throw InputError("the link rate must be positive");
  if (work.forward_s < 0 || work.backward_s < 0 || work.model_bytes < 0 || cluster.latency_s < 0) {
    throw InputError("compute times, model size and latency must not be negative");
  }
  Prediction p;
  // No all-reduce moves less over a host's link than its share out and the
  // others' in: 2(h-1)/h of the model, what a ring among hosts carries. A
  // flat ring over every worker carries more (Tandem's path counts it), so
  // the optimum of any all-reduce layout is the hierarchical one's bytes.
  p.load = linkLoad(work, cluster, isAllReduce(layout.algorithm) ? Layout{Algorithm::kHierAllReduce, 0} : layout);
  const double busiest = std::max(p.load.worker_host_bytes, p.load.server_host_bytes);
  double latency = 0;
  if (busiest > 0) {
    latency = latenciesPerGroup(cluster, layout) * cluster.latency_s;
  }
  p.comm_s = busiest / cluster.link_bytes_per_s + latency;
  p.single_s = work.forward_s + work.backward_s;
  p.step_s = work.forward_s + std::max(work.backward_s, p.comm_s);
  p.overlapped_step_s = std::max(p.single_s, p.comm_s);
  p.efficiency = p.step_s > 0 ? p.single_s / p.step_s : 1.0;
  p.samples_per_s = p.step_s > 0 ? cluster.workers() * work.batch_per_worker / p.step_s : 0;
  if (p.comm_s <= work.backward_s) {
    p.bottleneck = "compute";
  } else {
    p.bottleneck = linkBottleneck(p.load);
  }
  return p;
}

Prediction withLocalSteps(const Prediction& exchange, const Workload& work, const Cluster& cluster, int64_t h,
                          int64_t fragments, int64_t overlap_steps) {
  if (h < 1) throw InputError(fmt::format("local steps must be >= 1, got {}", h));
  if (fragments < 1 || fragments > h) {
    throw InputError(fmt::format("fragments must be in [1, local steps {}], got {}", h, fragments));
  }
  if (overlap_steps < 0) throw InputError(fmt::format("overlap steps must be >= 0, got {}", overlap_steps));
  Prediction p = exchange;
  const double per_step = exchange.step_s / static_cast<double>(h);
  p.load.worker_host_bytes /= static_cast<double>(h);
  p.load.server_host_bytes /= static_cast<double>(h);
  p.comm_s = per_step;
  p.single_s = work.forward_s + work.backward_s;
  const double fragment_s = exchange.step_s / static_cast<double>(fragments);
  const double exposed = std::max(0.0, fragment_s - static_cast<double>(overlap_steps) * p.single_s);
  p.step_s = p.single_s + exposed * static_cast<double>(fragments) / static_cast<double>(h);
  p.overlapped_step_s = std::max(p.single_s, per_step);
  p.efficiency = p.step_s > 0 ? p.single_s / p.step_s : 1.0;
  p.samples_per_s = p.step_s > 0 ? cluster.workers() * work.batch_per_worker / p.step_s : 0;
  if (per_step <= p.single_s) p.bottleneck = "compute";
  return p;
}

namespace {

// With a server on every host, one direction of a host's link carries this
// host's pushes and the other hosts' pulls from its server, half its bytes
// each: pushes and pulls queue on it together, in the order they are ready.
double sharedDirectionEnd(const Workload& work, const TandemPath& path, double per_byte, double per_group) {
  const double s = work.model_bytes;
  std::vector<double> pull_ready, pull_bytes;
  double produced = 0, link_free = 0, end = 0;
  size_t next_pull = 0;
  while (produced < s || next_pull < pull_ready.size()) {
    const double bytes = std::min(path.group_bytes, s - produced);
    const double push_ready = produced < s ? work.backward_s * (produced + bytes) / s : INFINITY;
    if (next_pull < pull_ready.size() && pull_ready[next_pull] < push_ready) {
      link_free = std::max(link_free, pull_ready[next_pull]) + pull_bytes[next_pull] * per_byte / 2 + per_group;
      end = link_free;
      ++next_pull;
      continue;
    }
    produced += bytes;
    link_free = std::max(link_free, push_ready) + bytes * per_byte / 2 + per_group;
    pull_ready.push_back(link_free + (path.apply_bytes_per_s > 0 ? bytes / path.apply_bytes_per_s : 0));
    pull_bytes.push_back(bytes);
  }
  return end;
}

// When a worker's exchange ends, from backward's start: each group crosses
// at `per_byte` once ready and once the link is free; a PS group is then
// applied and pulled back the same way, on the other direction.
double exchangeEnd(const Workload& work, const TandemPath& path, bool ring, double per_byte, double per_group) {
  const double s = work.model_bytes;
  double sent = 0;       // bytes produced so far
  double out_free = 0;   // when the outbound direction is free
  double back_free = 0;  // the PS pull direction
  while (sent < s) {
    const double bytes = std::min(path.group_bytes, s - sent);
    sent += bytes;
    const double ready = work.backward_s * sent / s;
    out_free = std::max(ready, out_free) + bytes * per_byte + per_group;
    if (!ring) {
      const double applied = out_free + (path.apply_bytes_per_s > 0 ? bytes / path.apply_bytes_per_s : 0);
      back_free = std::max(applied, back_free) + bytes * per_byte + per_group;
    }
  }
  return ring ? out_free : back_free;
}

// Asynchronous workers do not wait for each other, so they do not share the
// busiest link in lockstep: each sees it busy with the others' traffic a
// fraction u of the time and gets the rest (a processor-sharing link). u
// follows from the steps it causes; the fixed point is found by bisection.
// Workers on a host holding a server reach that share through loopback.
Prediction predictAsync(const Workload& work, const Cluster& cluster, const Layout& layout, const TandemPath& path,
                        Prediction p) {
  const double rate = cluster.link_bytes_per_s;
  const double round_bytes = std::max(p.load.worker_host_bytes, p.load.server_host_bytes);  // every worker one step
  const double k = layout.servers;
  const int n = cluster.workers();
  const int server_hosts = layout.algorithm == Algorithm::kPsColocated ? layout.servers : 0;
  const int near = std::min(n, server_hosts * cluster.workers_per_host);  // workers on a server host
  const double near_remote = cluster.hosts == 1 ? 0 : (k - 1) / k;        // their share that crosses a link
  auto stepAt = [&](double u, double remote_share) {
    const double per_byte = remote_share / (rate * (1 - u));
    return work.forward_s + std::max(work.backward_s, exchangeEnd(work, path, false, per_byte, cluster.latency_s + path.message_s));
  };
  // The busiest link's load the steps at u cause, as a fraction of its
  // rate: a round's bytes, spread over the workers by what each sends remotely.
  const double remote_weight = near * near_remote + (n - near);
  auto offered = [&](double u) {
    const double remote_steps_per_s = near * near_remote / stepAt(u, near_remote) + (n - near) / stepAt(u, 1.0);
    return round_bytes * remote_steps_per_s / remote_weight / rate;
  };
  double lo = 0, hi = 0.999;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (offered(mid) > mid ? lo : hi) = mid;
  }
  const double u = hi;
  const double near_step = stepAt(u, near_remote);
  const double far_step = stepAt(u, 1.0);
  p.step_s = near > 0 ? near_step : far_step;  // worker 0's
  p.samples_per_s = work.batch_per_worker * (near / near_step + (n - near) / far_step);
  p.efficiency = p.samples_per_s * p.single_s / (n * work.batch_per_worker);
  if (std::max(near_step, far_step) <= p.single_s * (1 + 1e-9)) {
    p.bottleneck = "compute";
  } else if (u > 0.95) {
    p.bottleneck = linkBottleneck(p.load);
  } else {
    p.bottleneck = "exchange after backward";
  }
  return p;
}

}  // namespace

Prediction predictTandem(const Workload& work, const Cluster& cluster, const Layout& layout, const TandemPath& path) {
  Prediction p = predict(work, cluster, layout);
  if (!(path.group_bytes > 0)) throw InputError("the bucket or chunk size must be positive");
  const bool ring = isAllReduce(layout.algorithm);
  // A ring group pays all its steps' latencies; a PS group one in each
  // direction, which exchangeEnd charges separately.
  double latencies = ring ? latenciesPerGroup(cluster, layout) : 1.0;
  if (layout.algorithm == Algorithm::kRingAllReduce) {
    // The flat all-reduce Gloo runs: halving-doubling for buckets below the
    // ring threshold. Over power-of-two workers placed host by host its
    // first log2(g) rounds stay on each host, so each link carries the
    // hierarchical bytes; otherwise count a ring.
    const int n = cluster.workers();
    const bool halving_doubling = std::min(path.group_bytes, work.model_bytes) < path.ring_threshold_bytes &&
                                  std::has_single_bit(static_cast<unsigned>(n)) &&
                                  std::has_single_bit(static_cast<unsigned>(cluster.workers_per_host));
    if (halving_doubling) {
      latencies = 2.0 * std::bit_width(static_cast<unsigned>(n) - 1);
    } else {
      p.load = linkLoad(work, cluster, layout);
    }
  }
  const double busiest = std::max(p.load.worker_host_bytes, p.load.server_host_bytes);
  if (busiest <= 0 || work.model_bytes <= 0) return p;  // nothing crosses a link
  if (path.asynchronous && !ring) return predictAsync(work, cluster, layout, path, p);
  const double per_byte = busiest / work.model_bytes / cluster.link_bytes_per_s;
  const double per_group = latencies * cluster.latency_s + path.message_s;
  if (path.priority && !ring) {
    // The first layers' chunk leaves last, overtakes the queue, is applied
    // and comes back; meanwhile the link stays busy with everything else.
    const double first = std::min(path.group_bytes, work.model_bytes);
    const double round_trip = 2 * (first * per_byte + per_group) +
                              (path.apply_bytes_per_s > 0 ? first / path.apply_bytes_per_s : 0);
    const double groups = std::ceil(work.model_bytes / path.group_bytes);
    const double link_busy = p.comm_s + groups * path.message_s;
    const double compute_bound = p.single_s + round_trip;
    p.step_s = std::max(compute_bound, link_busy);
    p.efficiency = p.single_s / p.step_s;
    p.samples_per_s = cluster.workers() * work.batch_per_worker / p.step_s;
    p.bottleneck = link_busy > compute_bound ? linkBottleneck(p.load) : "compute";
    return p;
  }
  const bool shared_direction = cluster.hosts > 1 && layout.servers == cluster.hosts &&
                                (flatOf(layout.algorithm) == Algorithm::kPsColocated);
  const double exchange_end = shared_direction ? sharedDirectionEnd(work, path, per_byte, per_group)
                                               : exchangeEnd(work, path, ring, per_byte, per_group);
  p.step_s = work.forward_s + std::max(work.backward_s, exchange_end);
  p.efficiency = p.step_s > 0 ? p.single_s / p.step_s : 1.0;
  p.samples_per_s = p.step_s > 0 ? cluster.workers() * work.batch_per_worker / p.step_s : 0;
  if (exchange_end <= work.backward_s) {
    p.bottleneck = "compute";
  } else if (p.bottleneck == "compute") {
    p.bottleneck = "exchange after backward";  // the links keep up, but the last groups start too late
  }
  return p;
}

std::string algorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kRingAllReduce: return "allreduce";
    case Algorithm::kPsColocated: return "ps-colocated";
    case Algorithm::kPsDedicated: return "ps-dedicated";
    case Algorithm::kHierAllReduce: return "hier-allreduce";
    case Algorithm::kHierPsColocated: return "hier-ps-colocated";
    case Algorithm::kHierPsDedicated: return "hier-ps-dedicated";
  }
  return "?";
}

Algorithm parseAlgorithm(const std::string& name) {
  if (name == "allreduce") return Algorithm::kRingAllReduce;
  if (name == "ps-colocated") return Algorithm::kPsColocated;
  if (name == "ps-dedicated") return Algorithm::kPsDedicated;
  if (name == "hier-allreduce") return Algorithm::kHierAllReduce;
  if (name == "hier-ps-colocated") return Algorithm::kHierPsColocated;
  if (name == "hier-ps-dedicated") return Algorithm::kHierPsDedicated;
  throw InputError(fmt::format("--layout: '{}' is not allreduce, ps-colocated, ps-dedicated, hier-allreduce, "
                               "hier-ps-colocated or hier-ps-dedicated",
                               name));
}

}  // namespace tandem::plan
