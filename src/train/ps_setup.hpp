#pragma once
// Joining a job's parameter servers with a model: the key layout its
// trainable parameters make, the workers' rendezvous (their fingerprints
// must agree), the host-mates a hierarchical sync job sums with, the
// protocol worker, the chief's init of every server (config, learning-rate
// table, initial values or a checkpoint's state) and every worker's hello
// and first pull. What it makes is the PS client's connection, which the
// push pipeline and the strategies use; the setup keeps nothing itself.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cluster/cluster_spec.hpp"
#include "cluster/job_context.hpp"
#include "core/deadline.hpp"
#include "core/push_format.hpp"
#include "ps/key_layout.hpp"
#include "train/chunked_parameters.hpp"
#include "train/cluster_join.hpp"
#include "train/config.hpp"
#include "train/ps_host_group.hpp"
#include "train/strategy.hpp"

namespace tandem::ps {
class Worker;
}  // namespace tandem::ps

namespace tandem::train {

// A worker's connection to the servers, ready for its first step.
struct PsConnection {
  PsConnection();
  PsConnection(PsConnection&&) noexcept;
  PsConnection& operator=(PsConnection&&) noexcept;
  // Failing out (the worker is neither done nor hung up): tells the
  // servers, briefly, that it is done, or, if it may start again in place
  // (--restart-wait, once training began), that it is leaving: a sync
  // job's others must start again too, and their waits for this start
  // then fail at once, not at --peer-timeout. An async task that rejoins
  // says nothing. Whatever pushes through the worker must be gone first.
  ~PsConnection();

  // Each wait for the servers: --peer-timeout and a margin.
  Deadline peerDeadline() const { return Deadline::afterSeconds(peer_timeout_s + 5.0); }
  // The bytes this worker itself pushes or pulls a step in `format`: the
  // model, or with host sums the chunks it owns.
  int64_t ownBytes(const PushFormat& format) const;
  // The summary's PS fields.
  nlohmann::json summary() const;
  // Says goodbye to the servers (unless done already) and hangs up, keeping
  // which servers were lost for the summary. Whatever pushes through the
  // worker must be gone first.
  void hangUp();

  ps::KeyLayout layout;
  ChunkedParameters model;  // trainable, registration order, by chunk
  ClusterJoin join;         // the coordinator's store (host-mates meet there)
  std::vector<cluster::HostPort> server_hosts;  // by server: the listed or published addresses
  std::vector<std::vector<int>> push_groups;  // sync, hierarchical: workers by host; empty: flat
  std::unique_ptr<PsHostGroup> host;          // this worker's host-mates, when it sums with them
  std::unique_ptr<ps::Worker> worker;         // the protocol
  size_t push_window = 0;                     // bytes per server (priority scheduling); 0: none
  int sharing_servers = 0;                    // servers that read and write this worker's shared memory
  bool parameters_in_arena = false;           // the model is those servers' pull landing area
  std::vector<int> lost_servers;              // after hangUp: servers lost while replicas carried on
  std::vector<int> rejoined_servers;          // after hangUp: lost servers whose replacements were taken back
  torch::Tensor shared_grads;                 // where those servers read pushes; undefined: none
  int64_t step = 0;  // this worker's first step: the plan's, or a lost predecessor's clock
  std::optional<RemoteParameters::Takeover> takeover;  // a replacement in a running elastic job
  int servers = 0;
  double peer_timeout_s = 0;
  // For the farewell: the job's start (null until connected), whether it
  // restarts in place, and whether it is sync.
  const cluster::JobStart* start = nullptr;
  bool restarts_in_place = false;
  bool sync = false;
};

struct PsSetup {
  const cluster::ClusterSpec& spec;
  const TrainConfig& config;
  Mode mode = Mode::PsSync;  // a server mode
  cluster::JobContext& context;
  bool joined = false;  // already a member (the APIs' init): no rendezvous
  // Streaming DiLoCo: chunk c's servers start at chunk_clock(c) updates, and
  // pulls never land in the model by themselves. Empty: off.
  std::function<int64_t(size_t chunk)> chunk_clock;
};

// Connects `model`'s trainable parameters (contiguous float32) to the job's
// servers, as `setup` says, for a run planned as `plan`; `fingerprint` is
// what every worker must agree on, to which the PS settings are added.
// Throws Error for a parameter the servers cannot hold, PeerError naming a
// server or host-mate that never answers, InputError for a disagreement.
PsConnection connectToServers(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan,
                              const PsSetup& setup);

}  // namespace tandem::train
