#pragma once
// One parameter chunk as a server holds it: values, optimizer slots, the
// gradients waiting for it and the pulls waiting on it, plus the pure
// arithmetic on it (initial layout, state packing, applying one update).
// No sockets: the server's I/O loop decides when; this file says what.
// Not thread-safe: a chunk is touched by the I/O thread, or by the one apply
// job that owns it while `busy`.
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/bytes.hpp"
#include "core/clock.hpp"
#include "net/shared_arena.hpp"
#include "ps/protocol.hpp"

namespace tandem::ps {

// Bytes a same-host worker named in its own shared memory: a push's
// gradient, or where it wants a pull's values.
struct ArenaDestination {
  std::shared_ptr<net::SharedArena> arena;  // keeps `bytes` mapped
  std::span<std::byte> bytes;               // checked against the arena
  net::ArenaRef ref;                        // what the reply names
};

struct PendingPull {
  std::string routing;
  uint64_t request_id = 0;
  uint64_t needed = 0;      // answer once the chunk has applied this many updates
  bool with_state = false;  // ps-state: add the optimizer slots
  Clock::time_point since = Clock::now();
  int worker = -1;         // who asked: the timeline, and delay compensation's record of its values
  int64_t received_us = 0;  // when it arrived, for the timeline (0: no timeline)
  // A snapshot's ps-state (async, SSP): answered once every worker's pushes
  // up to its clock here are applied, and nothing else is; empty otherwise.
  std::vector<uint32_t> snapshot;
  std::optional<ArenaDestination> into;  // values go there; the reply carries its ref
};

// What applying a push uses, decided on its arrival at its primary, so
// that both holders of a replicated chunk apply it alike.
struct ArrivalTerms {
  double lr = 0;
  uint64_t staleness = 0;     // this push's
  double mean_staleness = 0;  // over the server's pushes so far, this one in: the momentum's correction
};

// A push's acknowledgement, held until the push is where it must be.
struct HeldAck {
  std::string routing;
  uint64_t request_id = 0;
  uint64_t forward = 0;  // async replicas: the forward to the backup it also waits for (0: none)
};

struct QueuedPush {
  OwnedBytes grad;
  double lr = 0;  // the pushing worker's scheduled rate when it pushed (without `final`)
  int worker = -1;
  int64_t received_us = 0;  // timeline only
  uint32_t clock = 0;       // the worker's step it pushed
  // Replicas: the rate and the mean staleness the momentum is corrected
  // for, decided on arrival or by the primary that forwarded the push.
  std::optional<ArrivalTerms> final{};
  std::optional<HeldAck> ack{};  // replicas: sent once applied (and forwarded)
};

struct ChunkState {
  uint64_t key = 0;
  int64_t length = 0;
  std::vector<float> param;
  bool backup = false;  // --ps-replicas 2: held here as the backup of another server's chunk
  // Async replicas: copied here from its other holder (ps-copy), which
  // forwards its pushes here from then on, whatever the layout says.
  bool copied = false;
  std::vector<std::vector<float>> slots;  // the optimizer's, in slotCount's order
  bool initialized = false;
  bool busy = false;        // an apply job owns param and slots
  uint64_t applied = 0;     // updates applied
  uint64_t received = 0;    // updates started or queued (async)
  // Sync: this step's gradients, by worker, summed in worker order, from
  // the workers that push this chunk (every worker, or one per host).
  std::vector<std::optional<OwnedBytes>> step_grads;
  std::vector<int> pushers;  // ascending
  std::vector<int64_t> step_grad_us;  // when each arrived, for the timeline
  int step_grad_count = 0;
  // Sync, a backup: the next step's pushes that came before this step's
  // were all in. A backup may be one step behind the fastest worker, whose
  // next pull the primary answered; never more, since a backup acknowledges
  // a push only once its step is applied, and a worker pushes step t + 1
  // only after its step t pushes were acknowledged.
  std::vector<std::optional<OwnedBytes>> ahead_grads;
  std::vector<int64_t> ahead_grad_us;
  int ahead_grad_count = 0;
  // Sync, a backup: each push is acknowledged once its step is applied
  // here (both holders then have it, in the same order), so that its
  // worker neither rewrites the pushed bytes nor runs more than a step
  // ahead of the backup. This step's acknowledgements, and the next's.
  std::vector<HeldAck> step_acks, ahead_acks;
  std::deque<QueuedPush> queue;  // async pushes waiting for the chunk
  // Async and SSP: by worker, the steps whose push has arrived (its latest
  // push's step + 1; the start step before any).
  std::vector<uint32_t> pushed_through;
  std::vector<PendingPull> pulls;
  // A 16-bit wire's copy of `param`, remade after every change. Pulls send
  // it without copying: a change makes a new one, so a send in progress
  // keeps the bytes it started with.
  std::shared_ptr<const std::vector<uint16_t>> wire_param;
  // Delay compensation: by worker, the values it last pulled (empty when
  // off), and the gradients' moving mean square. A float32 pull sends the
  // record itself (recordPull), so one copy serves the reply and the record.
  std::vector<std::shared_ptr<std::vector<float>>> pulled_by;
  std::vector<float> mean_square;
  // Staleness-aware rates: by worker, the chunk's update count it last pulled.
  std::vector<uint64_t> pulled_at;
};

// Zeroed values and slots for `range`, with room for the sync pushes of
// `pushers` (pushersOf) among `workers`.
void initChunk(ChunkState& c, const ChunkRange& range, const optim::OptimizerSettings& optimizer, int workers,
               std::vector<int> pushers);

// Delay compensation: copies the values into `worker`'s record and returns
// it. A record a reply may still be sending is replaced, not overwritten.
std::shared_ptr<const std::vector<float>> recordPull(ChunkState& c, size_t worker);

// Bytes of the chunk's values alone, and of values plus optimizer slots
// (what ps-state answers and a resuming ps-set may carry).
size_t paramBytes(const ChunkState& c);
size_t stateBytes(const ChunkState& c);

// Loads a ps-set payload: the values, or the values and the slots. Returns
// false, changing nothing, when `size` is neither.
bool loadChunk(ChunkState& c, std::span<const std::byte> bytes);

// [param][slot 0][slot 1]..., copied.
SharedBytes packState(const ChunkState& c);

// Remakes c.wire_param from c.param for a 16-bit wire; nothing for fp32.
void refreshWireCopy(ChunkState& c, WireDtype wire);

// Bytes of one chunk's values in a pull (pushes: ServerConfig::pushFormat).
size_t wirePayloadBytes(const ChunkState& c, WireDtype wire);

// Floats of received bytes. ZeroMQ may hand over a buffer at any byte
// offset; an unaligned one is copied into `scratch` first.
float* floatsOf(std::span<std::byte> bytes, std::vector<float>& scratch);

// A pushed gradient as floats: its own bytes (float32, aligned), or
// decoded into `scratch`.
float* gradientOf(std::span<std::byte> bytes, size_t length, const PushFormat& format, std::vector<float>& scratch);

// The sum of the workers' gradients, in worker order (so every run adds in
// the same order), in float32, written into the first one's buffer or
// `scratch`. `shared`: another server reads the same pushed bytes (a
// replica's push by reference into the worker's shared memory), so the
// sum goes to `scratch`.
float* sumGradients(std::vector<OwnedBytes>& grads, size_t length, const PushFormat& format,
                    std::vector<float>& scratch, bool shared = false);

// Applies one update with the server's optimizer: `update_index` counts the
// chunk's updates (Adam's bias correction, SGD's first momentum step),
// `lr` is the learning rate of this update. Refreshes the wire copy.
// `correction`: delay compensation fused into the pass (SGD only).
// `optimizer`: settings in place of config's (a corrected momentum).
void applyUpdate(ChunkState& c, const float* grad, uint64_t update_index, double lr,
                 const ServerConfig& config, const optim::DelayCorrection* correction = nullptr,
                 const optim::OptimizerSettings* optimizer = nullptr);

// Takes the pulls the chunk can answer now: none while an apply owns it.
std::vector<PendingPull> takeReadyPulls(ChunkState& c);

// What a ready pull gets: the values (a 16-bit wire's copy, zero-copy), or
// for ps-state the packed float32 state. A
// sync pull of exactly the current version is zero-copy (nobody can push the
// next step before receiving it, so the values cannot change while ZeroMQ
// still reads them); anything else is a snapshot, so the next apply may start.
SharedBytes pullPayload(const ChunkState& c, const PendingPull& pull, bool sync, WireDtype wire);
// A pull into shared memory: writes the values there (in the wire dtype)
// and returns the reference the reply carries.
SharedBytes pullIntoArena(const ChunkState& c, const ArenaDestination& into, WireDtype wire);

// Takes the pulls that have waited `timeout` or longer by `now`.
std::vector<PendingPull> takeExpiredPulls(ChunkState& c, Clock::duration timeout, Clock::time_point now);

int64_t totalFloats(const std::deque<ChunkState>& chunks);

}  // namespace tandem::ps
