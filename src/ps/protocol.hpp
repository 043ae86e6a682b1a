#pragma once
// What workers and parameter servers say to each other, above the frame
// layer: the server configuration the chief sends, the hello every worker
// opens with, and the per-step clock report and the agreement it gets back.
// Torch-free; every decoder treats its bytes as untrusted and throws
// InputError naming the peer and the field.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/frame_header.hpp"
#include "net/shared_arena.hpp"
#include "core/push_format.hpp"
#include "core/training_mode.hpp"
#include "core/wire_dtype.hpp"
#include "optim/kernels.hpp"
#include "ps/delay_compensation.hpp"

namespace tandem::ps {

struct ChunkRange {
  uint64_t key = 0;
  int64_t length = 0;  // floats
};

// Everything one server needs to know, sent once by the chief (msg::kInit).
struct ServerConfig {
  Mode mode = Mode::PsSync;  // a server mode (usesServers)
  int staleness = 0;  // bounded mode only
  int workers = 1;
  optim::OptimizerSettings optimizer;
  // The learning rate for each global step, from the worker's schedule; the
  // server indexes it with the step it holds (the last entry repeats).
  std::vector<double> lr_by_step;
  uint64_t layout_fingerprint = 0;
  std::vector<ChunkRange> chunks;  // the chunks this server holds
  double peer_timeout_s = 120;     // how long a step waits for a worker
  uint32_t start_step = 0;         // a resumed run's first step: every worker's clock starts there
  // Async: the job's whole-model updates to make; ps 0 stops every worker
  // once it has granted that many. Other modes count steps per worker.
  uint64_t total_steps = 0;
  // How pushes arrive and pulls leave; ps-set and ps-state stay float32.
  WireDtype wire = WireDtype::kFloat32;
  // 8 or 4: pushes arrive quantised (core/push_format.hpp); 0: in `wire`.
  int push_bits = 0;
  // Sync mode, hierarchical: the workers of each host, who first sum their
  // gradients among themselves; chunk k of a host is pushed (and pulled) by
  // one of them only, group[k % group size]. Empty: every worker pushes
  // every chunk.
  std::vector<std::vector<int>> push_groups;
  // Which start of the chief sent this (a random nonce per process), and the
  // start it replaces after a failure (0: none). A server initialised by
  // `replaces` starts over with this init; any other second init is refused.
  uint64_t generation = 0;
  uint64_t replaces = 0;
  // Async and SSP: DC-ASGD's lambda0 (ps/delay_compensation.hpp); 0: off.
  // Each server then keeps, per worker, the values that worker last pulled.
  double delay_compensation = 0;
  DelayForm delay_form = DelayForm::kAdaptive;
  // Async and SSP: each push's rate divided by its staleness, the updates
  // its chunk took between its worker's pull and this apply (Zhang et al.,
  // IJCAI 2016), when that is more than one.
  bool staleness_lr = false;
  // With staleness_lr: the optimizer's momentum (SGD, RMSprop; Adam's
  // beta1) lowered for the momentum the measured staleness adds
  // (ps/staleness_counts.hpp, correctedMomentum).
  bool momentum_correction = false;
  // Sync, --ps-replicas 2: every chunk is held by two servers, and ps 1
  // keeps the step clocks too (every worker reports to both), so that the
  // job goes on when either dies. 1: ps 0 alone keeps them.
  int replicas = 1;
  // The keys among `chunks` this server holds as a backup (replicas 2):
  // their pushes are acknowledged once applied, and may run a step ahead.
  std::vector<uint64_t> backup_chunks;
  // Async and SSP, replicas 2: the server that backs up this one's own
  // chunks. Each applied push goes on to it (ps-forward), in this server's
  // order, and is acknowledged once applied there too. Empty: none.
  std::string forward_to;    // its endpoint
  std::string forward_name;  // "ps 1"

  double lrAt(uint64_t step) const;
  PushFormat pushFormat() const { return {wire, push_bits}; }
  // "5s": how errors name the peer timeout.
  std::string peerTimeoutText() const;
};

// Within a host's group of `group_size` workers, the position of the one
// that pushes and pulls chunk `key` for the host: workers and servers both
// follow it.
constexpr size_t pusherRank(uint64_t key, size_t group_size) { return key % group_size; }

// The workers whose push chunk `key` waits for each sync step, ascending.
std::vector<int> pushersOf(const ServerConfig& config, uint64_t key);

nlohmann::json toJson(const ServerConfig& config);
// Throws InputError "<peer>: ps-init: <field> ..." on a missing or bad field.
ServerConfig serverConfigFromJson(const nlohmann::json& j, std::string_view peer);
// A ps-init payload: JSON, decoded, and bounded so that one message cannot
// make a server allocate without limit (worker count, chunks no larger than
// a frame may carry). Throws InputError naming what is wrong.
ServerConfig decodeServerInit(std::string_view text, uint64_t max_payload_bytes, std::string_view peer);

struct Hello {
  uint32_t worker = 0;
  uint64_t layout_fingerprint = 0;
  // The chief's start the worker joined: a server answers it once the
  // init of that start has arrived (ServerConfig::generation).
  uint64_t generation = 0;
  // Sync: a replacement for a worker that died. kAskJoinStep to the first
  // step-clock keeper, which answers where it joins (HelloAnswer::clock + 1);
  // that step to every other server, which expects its pushes from then on.
  uint32_t sync_join = kNotJoining;
  static constexpr uint32_t kNotJoining = 0;
  static constexpr uint32_t kAskJoinStep = 0xFFFFFFFF;
  // A worker on the server's host offers its shared memory (pushes and
  // pulls then cross without socket copies); absent over the network.
  std::optional<net::ArenaHandle> arena = std::nullopt;
};
std::vector<char> encode(const Hello& hello);
Hello decodeHello(std::span<const std::byte> bytes, std::string_view peer);

// Ps 0's answer to a hello: where this worker index stands in the job. A
// worker of a running async or SSP job that replaces one that died finds
// clock > start_step and continues from there (its predecessor's steps).
struct HelloAnswer {
  uint32_t clock = 0;       // steps this worker index has finished, from 0
  uint32_t start_step = 0;  // the step the servers' job started (or resumed) at
  bool arena_mapped = false;  // this server mapped the hello's arena: use it
  // Async replicas: a replacement whose chunks the other holders copied and
  // feed (they order the pushes): workers turn to it only when they die.
  bool fed = false;
  // Async: a replacement that came after every step of the job was granted
  // makes none.
  bool finished = false;
};
std::vector<char> encode(const HelloAnswer& answer);
HelloAnswer decodeHelloAnswer(std::span<const std::byte> bytes, std::string_view peer);

// Where a held job stands (ps 0's answer to msg::kHold), and what a snapshot's
// ps-state asks for: every worker's clock (0 for a lost worker, whose last
// pushes may never come) and the job's global step there.
struct SnapshotPoint {
  uint64_t global_step = 0;
  std::vector<uint32_t> clocks;  // by worker
};
std::vector<char> encode(const SnapshotPoint& point);
// Throws InputError naming `peer` unless the payload holds exactly
// `workers` clocks (any count the payload holds, for `workers` 0).
SnapshotPoint decodeSnapshotPoint(std::span<const std::byte> bytes, size_t workers, std::string_view peer);

// No server: a StepReport's or StepAgreement's rejoining_server when none rejoins.
inline constexpr uint32_t kNoServer = 0xffffffffu;

// A worker's report at the end of a step (msg::kClock to server 0).
struct StepReport {
  double loss = 0;             // this worker's mean loss for the step
  double compute_seconds = 0;  // its time from the last agreement to this report
  bool stop = false;           // it was asked to stop
  bool checkpoint = false;     // it asks every worker to checkpoint at this step (DiLoCo's chief)
  // The chief, sync with --ps-replicas 2: a lost server whose replacement
  // waits, fresh, to be taken back after this step (kNoServer: none).
  uint32_t rejoining_server = kNoServer;
};
std::vector<char> encode(const StepReport& report);
StepReport decodeStepReport(std::span<const std::byte> bytes, std::string_view peer);

// Server 0's answer, sent once the worker may start its next step.
struct StepAgreement {
  double loss = 0;                // sync: mean over workers; otherwise the worker's own
  double slowest_compute_seconds = 0;  // sync: the slowest worker's compute time
  bool stop = false;              // sync: any worker asked to stop
  uint32_t slowest_clock = 0;     // steps the slowest worker had finished at reply time
  // Whole-model updates the job has made (async: every worker's steps added
  // up, from a resumed run's start; sync and SSP: the step itself).
  uint64_t global_step = 0;
  bool finished = false;          // async: the job's --max-steps are all granted; end here
  bool checkpoint = false;        // sync: some worker asked for a checkpoint at this step
  // Sync: the server every worker takes back after this step, before its
  // next push (the chief's report named it); kNoServer: none.
  uint32_t rejoining_server = kNoServer;
};
std::vector<char> encode(const StepAgreement& agreement);
StepAgreement decodeStepAgreement(std::span<const std::byte> bytes, std::string_view peer);

// What rides before the gradient in a ps-forward (msg::kForward): which
// worker pushed it, the chunk's updates before it at the primary (the
// backup's must be the same), and the rate the primary applied it with.
struct ForwardHead {
  uint32_t worker = 0;
  uint32_t clock = 0;  // the worker's step it pushed (the header's clock, kept for the backup's dedup)
  uint64_t update = 0;
  double lr = 0;
  // The push's staleness (the backup counts it too) and the mean its
  // momentum is corrected for (--async-momentum-correction).
  uint64_t staleness = 0;
  double mean_staleness = 0;
};
inline constexpr size_t kForwardHeadBytes = 40;
// The head (its size keeps the gradient 8-byte aligned), then the
// gradient's bytes as they were pushed.
std::vector<char> encodeForward(const ForwardHead& head, std::span<const std::byte> grad);
// Throws InputError naming `peer` when the payload is shorter than a head
// or its rate or mean staleness is not finite and non-negative; `grad` is
// the rest.
ForwardHead decodeForward(std::span<const std::byte> bytes, std::string_view peer, std::span<const std::byte>& grad);

// The chief's ps-replicate (msg::kReplicate) to a live holder: `server`'s
// replacement waits, initialised, at `endpoint`; copy it the chunks `keys`
// (those both hold) and forward their pushes there from then on.
struct ReplicaRequest {
  uint32_t server = 0;
  std::string endpoint;
  std::string name;  // "ps 0"
  std::vector<uint64_t> keys;
};
std::vector<char> encode(const ReplicaRequest& request);
ReplicaRequest decodeReplicaRequest(std::span<const std::byte> bytes, std::string_view peer);

// What rides before a chunk's state in a ps-copy (msg::kCopy).
struct CopyHead {
  uint64_t applied = 0;                  // the chunk's updates the state holds
  std::vector<uint32_t> pushed_through;  // by worker: ChunkState::pushed_through
  std::vector<uint64_t> pulled_at;       // by worker, staleness-aware rates only (else empty)
};
std::vector<char> encodeCopy(const CopyHead& head, std::span<const std::byte> state);
// Throws InputError naming `peer` unless the head is whole and lists
// `workers` entries; `state` is the rest.
CopyHead decodeCopy(std::span<const std::byte> bytes, size_t workers, std::string_view peer,
                    std::span<const std::byte>& state);

// Where each worker stands at a holder that keeps the step clocks, mirrored
// to a replacement so that it can answer in its place (StepClocks::State),
// with each worker's rate from ps-lr (NaN: it follows the table).
struct WorkerMirror {
  std::vector<uint32_t> clocks;
  std::vector<bool> done, lost, holds_grant;
  uint64_t granted = 0;
  uint64_t reported = 0;
  uint32_t max_staleness = 0;
  bool has_clocks = false;  // the sender keeps the step clocks
  std::vector<double> lr;
};
std::vector<char> encode(const WorkerMirror& mirror);
WorkerMirror decodeWorkerMirror(std::span<const std::byte> bytes, size_t workers, std::string_view peer);

// A server's answer to msg::kStatus.
struct ServerStatus {
  bool initialised = false;  // the chief's init has arrived: it serves a job
  bool ready = false;        // every chunk is set: it answers hellos
};
std::vector<char> encode(const ServerStatus& status);
ServerStatus decodeServerStatus(std::span<const std::byte> bytes, std::string_view peer);

// A worker's rate for its next pushes (msg::kLr), replacing the schedule.
struct LearningRate {
  double lr = 0;
};
std::vector<char> encode(const LearningRate& rate);
// Throws InputError naming `peer` unless the payload holds one finite,
// non-negative rate.
LearningRate decodeLearningRate(std::span<const std::byte> bytes, std::string_view peer);

// The type a server answers `request` with when it succeeds (kError aside):
// kOk, msg::kValues or msg::kAgreement; never the request's own type.
net::MessageType replyTypeOf(net::MessageType request);

}  // namespace tandem::ps
