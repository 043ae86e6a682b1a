#include "train/ps_setup.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <string>

#include "cluster/job_start.hpp"
#include "cluster/server_addresses.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/wire_dtype.hpp"
#include "obs/metrics_writer.hpp"
#include "ps/protocol.hpp"
#include "ps/worker.hpp"
#include "train/lr_schedule.hpp"

namespace tandem::train {

PsConnection::PsConnection() = default;
PsConnection::PsConnection(PsConnection&&) noexcept = default;
PsConnection& PsConnection::operator=(PsConnection&&) noexcept = default;
PsConnection::~PsConnection() {
  if (!worker || worker->done() || start == nullptr) return;
  const bool rejoins = restarts_in_place && start->training;
  if (rejoins && !sync) return;
  try {
    rejoins ? worker->sayLeaving(Deadline::afterSeconds(1.0)) : worker->sayDone(Deadline::afterSeconds(1.0));
  } catch (const std::exception&) {
  }
}

int64_t PsConnection::ownBytes(const PushFormat& format) const {
  size_t bytes = 0;
  for (const auto& c : layout.chunks) {
    const bool own = !host || ps::pusherRank(c.key, host->size()) == static_cast<size_t>(host->rank());
    if (own) bytes += format.bytes(static_cast<size_t>(c.length));
  }
  return static_cast<int64_t>(bytes);
}

nlohmann::json PsConnection::summary() const {
  return {{"servers", servers},
          {"chunks", layout.chunks.size()},
          {"hierarchical", !push_groups.empty()},
          {"replicas", layout.replicas()},
          // Servers lost while their chunks went on at the other replica.
          {"lost_servers", worker ? worker->lostServers() : lost_servers},
          // Lost servers whose replacements were taken back, with their chunks.
          {"rejoined_servers", worker ? worker->rejoinedServers() : rejoined_servers},
          {"push_window_bytes", push_window},  // per server; 0: none
          {"shared_memory_servers", sharing_servers},
          {"parameters_in_shared_memory", parameters_in_arena}};  // pulls land in the model
}

void PsConnection::hangUp() {
  if (!worker) return;
  if (!worker->done()) worker->sayDone(peerDeadline());
  lost_servers = worker->lostServers();
  rejoined_servers = worker->rejoinedServers();
  worker.reset();  // hang up at once: a server closes once its workers have
}

namespace {

// Where each server is reached from this host.
std::vector<ps::ServerAddress> serverAddresses(const PsSetup& setup, const std::vector<cluster::HostPort>& hosts) {
  std::vector<ps::ServerAddress> servers;
  for (int i = 0; i < setup.spec.numServers(); ++i) {
    const auto& host = hosts[static_cast<size_t>(i)];
    // A server on loopback is on this host: its Unix socket skips TCP.
    const std::string endpoint = net::isLoopbackHost(host.host)
                                     ? net::sameHostEndpoint(host.port, setup.context.security())
                                     : net::tcpEndpoint(host.host, host.port);
    servers.push_back({endpoint, cluster::taskName(cluster::Role::kPs, i)});
  }
  return servers;
}

// What the chief tells server `server` of the job.
ps::ServerConfig serverConfig(const PsSetup& setup, const std::vector<cluster::HostPort>& hosts,
                              const ps::KeyLayout& layout, const std::vector<std::vector<int>>& push_groups, int server,
                              const StepPlan& plan) {
  const TrainConfig& config = setup.config;
  const int workers = setup.spec.num_workers;
  ps::ServerConfig c;
  c.mode = setup.mode;
  c.staleness = std::max(0, config.distributed.staleness);
  c.workers = workers;
  c.optimizer = config.optimizer;
  // The server holds the global step, so it looks the rate up itself.
  const double per_update = static_cast<double>(config.accumulate) * (setup.mode == Mode::PsSync ? workers : 1);
  // Open-ended (total_steps 0): one rate; the APIs send theirs with ps-lr.
  const int64_t table_steps = std::max<int64_t>(1, plan.total_steps);
  LrSchedule schedule(config.optimizer, config.lr, plan.steps_per_epoch, table_steps, per_update);
  for (int64_t t = 0; t < table_steps; ++t) c.lr_by_step.push_back(schedule.at(t));
  c.layout_fingerprint = layout.fingerprint();
  for (const auto& chunk : layout.chunksHeldBy(server)) {
    c.chunks.push_back({chunk.key, chunk.length});
    if (chunk.backup == server) c.backup_chunks.push_back(chunk.key);
  }
  c.replicas = layout.replicas();
  if (c.replicas > 1 && setup.mode != Mode::PsSync) {
    // Async and SSP: this server forwards each push it applies to the
    // backup of its own chunks (the next server), which orders them as it did.
    for (const auto& chunk : layout.chunks) {
      if (chunk.server != server || chunk.backup < 0) continue;
      const ps::ServerAddress to = serverAddresses(setup, hosts)[static_cast<size_t>(chunk.backup)];
      c.forward_to = to.endpoint;
      c.forward_name = to.name;
      break;
    }
  }
  c.peer_timeout_s = config.distributed.peer_timeout_s;
  c.start_step = static_cast<uint32_t>(plan.start_step);
  // Open-ended: async never stops the workers; they leave when done.
  c.total_steps = plan.total_steps > 0 ? static_cast<uint64_t>(plan.total_steps) : std::numeric_limits<uint32_t>::max();
  c.wire = config.distributed.wire_dtype;
  c.push_bits = config.distributed.push_bits;
  c.push_groups = push_groups;
  c.delay_compensation = config.distributed.delay_compensation;
  c.delay_form = config.distributed.delay_compensation_form;
  c.staleness_lr = stalenessLrOn(config.distributed);
  c.momentum_correction = momentumCorrectionOn(config.distributed);
  c.generation = setup.context.start().generation, c.replaces = setup.context.start().replaces;
  return c;
}

// The model's worth of float32 at `at` inside the worker's shared memory,
// as a tensor that keeps the memory mapped.
torch::Tensor arenaFloats(const ps::Worker& worker, std::byte* at) {
  return torch::from_blob(at, {worker.layout().total_floats}, [arena = worker.sharedArena()](void*) {},
                          torch::kFloat32);
}

// The chunk size the servers get: --ps-chunk-mb, or from the model; a
// model smaller than one chunk per server gets smaller chunks, so that no
// server sits idle.
int64_t chunkFloats(const PsSetup& setup, int64_t total_floats) {
  const DistributedConfig& d = setup.config.distributed;
  const int servers = setup.spec.numServers();
  const auto requested = d.ps_chunk_mb > 0 ? static_cast<int64_t>(d.ps_chunk_mb * 1024 * 1024) / 4
                                           : ps::autoPsChunkFloats(total_floats, servers);
  const int64_t chunk_floats = ps::chunkFloatsFor(total_floats, requested, servers);
  if (chunk_floats < requested && d.ps_chunk_mb > 0 && setup.spec.isChief()) {
    TANDEM_LOG_INFO("{:.2f} MB of parameters over {} servers: chunks of {:.3f} MB instead of --ps-chunk-mb {}",
                    total_floats * 4 / 1e6, servers, chunk_floats * 4 / 1e6, d.ps_chunk_mb);
  }
  return chunk_floats;
}

// What every worker must agree on besides the run's own fingerprint.
nlohmann::json withPsFingerprint(nlohmann::json fp, const PsSetup& setup, const ps::KeyLayout& layout,
                                 int64_t chunk_floats, const std::vector<std::vector<int>>& push_groups) {
  const DistributedConfig& d = setup.config.distributed;
  // Async and SSP jobs are elastic: a replacement for a lost worker joins
  // with the run directory's newest checkpoint, not the one the job started
  // from, and takes its step from ps 0 instead (hello).
  if (setup.mode != Mode::PsSync) fp.erase("start_step");
  fp["ps"] = {{"mode", std::string(modeName(setup.mode))},
              {"staleness", d.staleness},
              {"servers", setup.spec.numServers()},
              {"chunk_bytes", chunk_floats * 4},
              {"wire_dtype", wireDtypeName(d.wire_dtype)},
              {"error_feedback", d.error_feedback},
              {"push_bits", d.push_bits},
              {"delay_compensation", d.delay_compensation},
              {"delay_compensation_form", d.delay_compensation_form},
              {"staleness_lr", stalenessLrOn(d)},
              {"momentum_correction", momentumCorrectionOn(d)},
              {"local_steps", d.local_steps},
              {"layout", fmt::format("{:016x}", layout.fingerprint())},
              {"replicas", d.ps_replicas},
              {"hierarchical", push_groups}};
  return fp;
}

std::unique_ptr<ps::Worker> makeWorker(const PsSetup& setup, const PsConnection& link, const StepPlan& plan) {
  const cluster::ClusterSpec& spec = setup.spec;
  const DistributedConfig& d = setup.config.distributed;
  std::vector<ps::ServerAddress> servers = serverAddresses(setup, link.server_hosts);
  ps::Liveness liveness;
  liveness.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(d.heartbeat_timeout_s * 1000));
  liveness.heartbeat_interval = std::min(liveness.heartbeat_interval, liveness.heartbeat_timeout / 4);
  return std::make_unique<ps::Worker>(
      ps::WorkerOptions{servers, link.layout, setup.mode, static_cast<uint32_t>(spec.index), d.wire_dtype,
                        link.push_window, liveness, setup.context.start().generation,
                        // Pushes from shared memory would copy from the device into pageable memory.
                        d.shared_memory == Switch::kOn && !link.model.staged(), d.error_feedback, plan.timeline,
                        d.push_bits, setup.joined || setup.context.start().joins_running},
      setup.context.security());
}

// Same-host servers then write pulls straight into the model: each
// parameter becomes a view of its place in the shared memory's landing
// area. Safe because nothing reads a chunk's parameters between its pull's
// request and its receipt: backward is done with them once their gradients
// are pushed, and the next forward awaits them.
void placeParametersInArena(PsConnection& link, const PsSetup& setup) {
  if (link.sharing_servers == 0 || setup.config.distributed.wire_dtype != WireDtype::kFloat32 || link.host ||
      link.model.staged() || setup.chunk_clock) {
    return;
  }
  link.model.placeIn(arenaFloats(*link.worker, link.worker->pullLanding()));
  link.parameters_in_arena = true;
}

// A sync replacement joins at the step the first step-clock keeper chose.
// Its report of that step, with no push, lets the others go on with it;
// it then reads on in its shard from there. The batches of the steps its
// predecessor missed are not trained on.
void joinRunningSyncJob(PsConnection& link, const cluster::ClusterSpec& spec, const ps::HelloAnswer& answer,
                        const StepPlan& plan, Deadline deadline) {
  const int64_t joins = int64_t{answer.clock} + 1;
  bool finished = plan.total_steps > 0 && answer.clock >= plan.total_steps;
  if (!finished) {
    const ps::StepAgreement agreed = link.worker->reportStep(joins, ps::StepReport{}, deadline);
    if (agreed.rejoining_server != ps::kNoServer) {
      link.worker->takeBackServer(static_cast<int>(agreed.rejoining_server), joins, deadline);
    }
    finished = agreed.stop;
  }
  const int64_t clock = finished ? answer.clock : joins;
  link.takeover = RemoteParameters::Takeover{answer.start_step, clock, finished};
  link.step = clock;
  TANDEM_LOG_WARN("{}: joined a running sync job in place of a lost worker {}: it trains from step {} on ({}); the "
                  "batches of the steps its predecessor missed are skipped",
                  spec.taskName(), spec.index, clock + 1, finished ? "none are left" : "the others waited for it");
}

// Without a launcher to record it, a worker started again by hand into the
// running job writes its own line of OUT/restarts.jsonl. `step`: the steps
// the job had done when it joined (it trains from the next).
void recordJoinByHand(const cluster::ClusterSpec& spec, const std::string& out_dir, int64_t step) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  try {
    obs::appendJsonLine(std::filesystem::path(out_dir) / "restarts.jsonl",
                        {{"kind", "worker_rejoined"},
                         {"time", now},
                         {"replaced", spec.taskName()},
                         {"started_by", "its own command"},
                         {"joined_at_step", step},
                         {"lost_updates", 0},
                         {"rolled_back", false}});
  } catch (const Error& e) {
    TANDEM_LOG_WARN("{}", e.what());
  }
}

}  // namespace

PsConnection connectToServers(torch::nn::Module& model, const nlohmann::json& fingerprint, const StepPlan& plan,
                              const PsSetup& setup) {
  const cluster::ClusterSpec& spec = setup.spec;
  const DistributedConfig& d = setup.config.distributed;
  PsConnection link;
  link.servers = spec.numServers();
  link.peer_timeout_s = d.peer_timeout_s;
  std::vector<ps::TensorSpec> specs;
  std::vector<torch::Tensor> params;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (p.scalar_type() != torch::kFloat32 || !p.is_contiguous()) {
      throw Error(fmt::format("parameter {} is not a contiguous float32 tensor; the parameter server holds those only",
                              item.key()));
    }
    params.push_back(p);
    specs.push_back({item.key(), p.numel()});
  }
  int64_t total_floats = 0;
  for (const auto& t : specs) total_floats += t.numel;
  const int64_t chunk_floats = chunkFloats(setup, total_floats);
  checkPsReplicas(d, spec.numServers());
  link.layout = ps::buildKeyLayout(specs, spec.numServers(), chunk_floats * 4, d.ps_replicas);
  if (auto idle = ps::idleServers(link.layout); !idle.empty() && spec.isChief()) {
    TANDEM_LOG_WARN("ps {} hold(s) no parameters: the model has fewer floats ({}) than there are servers",
                    fmt::join(idle, ", "), total_floats);
  }
  link.model = ChunkedParameters(std::move(params), link.layout);

  // Hierarchical aggregation needs the coordinator's store to meet host-mates.
  const auto groups = cluster::workersByHost(spec);
  if (setup.mode == Mode::PsSync && !setup.joined && cluster::useHostGroups(groups, d.hierarchical)) {
    if (d.ps_replicas > 1) {
      throw InputError("--ps-replicas 2 with host sums (--hierarchical auto across hosts with several workers each): "
                       "not built; pass --hierarchical off");
    }
    link.push_groups = groups;
  }
  Stopwatch watch;
  if (!setup.joined) {
    link.join = joinAsWorker(spec, d, withPsFingerprint(fingerprint, setup, link.layout, chunk_floats, link.push_groups),
                             setup.context);
  }
  // Under a launcher (--ps K), the servers published where they listen.
  link.server_hosts = spec.ps_hosts;
  if (spec.servers_published) {
    TANDEM_ENFORCE(link.join.store != nullptr, "published server addresses need the coordinator's store");
    link.server_hosts = cluster::readServerAddresses(
        *link.join.store, spec.numServers(),
        Deadline::afterSeconds(cluster::startupSeconds(setup.context.start(), d.rendezvous_timeout_s)));
  }
  const auto mine = std::find_if(groups.begin(), groups.end(), [&](const std::vector<int>& g) {
    return std::find(g.begin(), g.end(), spec.index) != g.end();
  });
  // A worker alone on its host pushes every chunk itself, as in the flat layout.
  if (!link.push_groups.empty() && mine != groups.end() && mine->size() > 1) {
    std::vector<PsHostGroup::Range> ranges;
    for (const auto& chunk : link.layout.chunks) ranges.push_back({chunk.begin, chunk.length});
    link.host = std::make_unique<PsHostGroup>(*link.join.store, *mine, spec.index, d.peer_timeout_s,
                                              std::move(ranges), plan.timeline);
  }
  // Host-mates share this worker's link to a server, and so its window.
  const size_t pushers =
      mine == groups.end() ? 1 : ps::hostPushersPerServer(link.layout, *mine, spec.index, link.host != nullptr);
  link.push_window = d.priority == Switch::kOn ? ps::defaultPushWindow(link.layout, d.wire_dtype, pushers) : 0;
  link.worker = makeWorker(setup, link, plan);

  const Deadline startup =
      Deadline::afterSeconds(cluster::startupSeconds(setup.context.start(), d.rendezvous_timeout_s));
  // The chief sets the servers up, unless it was started again into the
  // running job (async and SSP): then they hold the job, and it pulls.
  const bool sets_up = spec.isChief() && !setup.context.start().joins_running;
  auto configsFor = [&](const StepPlan& job) {
    std::vector<ps::ServerConfig> configs;
    for (int i = 0; i < spec.numServers(); ++i) {
      configs.push_back(serverConfig(setup, link.server_hosts, link.layout, link.push_groups, i, job));
    }
    return configs;
  };
  if (sets_up) {
    const std::vector<ps::ServerConfig> configs = configsFor(plan);
    link.worker->initServers(
        configs,
        [&](size_t c, int64_t& applied) {
          std::vector<float> values = link.model.gather(c);
          if (plan.start_step > 0 && plan.optimizer != nullptr) {
            // Sync: one update per step; async: one per global step; SSP: one per worker per step.
            const int64_t updates = plan.start_step * (setup.mode == Mode::Ssp ? spec.num_workers : 1);
            applied = link.model.appendOptimizerState(c, *plan.optimizer, setup.config.optimizer, updates, values);
          }
          if (setup.chunk_clock) applied = setup.chunk_clock(c);
          return values;
        },
        startup);
  }
  const bool replaces_sync_worker = setup.mode == Mode::PsSync && setup.context.start().joins_running;
  const ps::HelloAnswer answer = link.worker->hello(startup, replaces_sync_worker);
  if (spec.isChief() && !sets_up) {
    // Started again, the chief still sets a lost server's replacement up as
    // the first chief would have, from the job's own start.
    StepPlan job = plan;
    job.start_step = answer.start_step;
    link.worker->rememberServerConfigs(configsFor(job));
  }
  link.sharing_servers = link.worker->serversSharingMemory();
  placeParametersInArena(link, setup);
  if (link.sharing_servers > 0) link.shared_grads = arenaFloats(*link.worker, link.worker->sharedArena()->data());
  link.step = plan.start_step;
  if (replaces_sync_worker) {
    joinRunningSyncJob(link, spec, answer, plan, startup);
    if (setup.context.start().joined_by_hand) recordJoinByHand(spec, setup.config.out_dir, link.step);
  } else if (setup.mode != Mode::PsSync &&
      (answer.clock != plan.start_step || answer.start_step != plan.start_step || answer.finished)) {
    link.takeover = RemoteParameters::Takeover{answer.start_step, answer.clock, answer.finished};
    link.step = answer.clock;
    TANDEM_LOG_WARN("{}: joined a running job in place of a lost worker {}: continuing its clock at step {} ({} "
                    "step(s) after the job's start at {})",
                    spec.taskName(), spec.index, answer.clock, answer.clock - answer.start_step, answer.start_step);
  }
  if (!sets_up) {
    link.worker->pullAll(setup.mode == Mode::PsSync && !setup.chunk_clock ? link.step : 0);
    link.worker->receivePulls(startup, plan.start_step, [&](size_t c, const ps::PulledValues& v) {
      link.model.scatter(c, v.data, v.wire);  // the worker checked its size
    });
  }
  TANDEM_LOG_INFO("{}: {} mode with {} server(s), {} chunk(s) of up to {:.1f} MB, {:.1f} MB of parameters{}{}; ready "
                  "in {:.2f}s", spec.taskName(), modeName(setup.mode), spec.numServers(), link.layout.chunks.size(),
                  chunk_floats * 4 / 1e6, link.layout.total_floats * 4 / 1e6,
                  link.host ? fmt::format(", summed with {} host-mate(s) first (--hierarchical auto)",
                                          link.host->size() - 1)
                            : "",
                  link.sharing_servers > 0 ? fmt::format(", shared memory with {} server(s) here", link.sharing_servers)
                                           : "",
                  watch.elapsed());
  // From here a failure tells the servers.
  link.start = &setup.context.start();
  link.restarts_in_place = d.restart_wait_s > 0;
  link.sync = setup.mode == Mode::PsSync;
  return link;
}

}  // namespace tandem::train
