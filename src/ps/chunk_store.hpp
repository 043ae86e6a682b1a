#pragma once
// The chunks one parameter server holds, and the policy over them: which
// push starts an apply, which pulls an apply releases, when a held pull
// fails and whom it names. It takes decoded requests and `now`, and returns
// the replies to send and the applies to run; no sockets, no threads, so a
// test can replay any ordering in microseconds.
// The server's I/O thread owns it. An ApplyJob runs elsewhere (the apply
// pool) and touches only its own chunk, which is `busy` meanwhile.
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/bytes.hpp"
#include "core/clock.hpp"
#include "ps/chunk_state.hpp"
#include "ps/protocol.hpp"
#include "ps/staleness_counts.hpp"

namespace tandem::ps {

// A request that must be refused: the reason goes back in the error reply.
struct Refusal {
  std::string reason;
};

// A frame for one requester: an answered pull, or the error that fails it.
// `payload` may point into chunk memory or a worker's record (zero-copy):
// its owner keeps that alive, and the sender wraps it without a copy.
struct Reply {
  std::string routing{};
  net::FrameHeader header{};
  SharedBytes payload{};
  uint64_t shared_bytes = 0;  // values written into the requester's shared memory (a pull into its arena)
  int worker = -1;            // for the timeline's pull span
  int64_t received_us = 0;    // when the pull arrived (0: no timeline)
};

// One update of one chunk, for the apply pool.
struct ApplyJob {
  size_t chunk = 0;
  uint64_t key = 0;     // the chunk's, for names in spans and errors
  uint64_t update = 0;  // the chunk's updates before this one (a sync job's step)
  double lr = 0;
  // Sync: every pusher's gradient of the step, in worker order, to be summed.
  // Async and SSP: one push.
  std::vector<OwnedBytes> grads{};
  std::vector<std::pair<int, int64_t>> arrivals{};  // (worker, received_us): the timeline's queued spans
  bool awaited = true;  // a pull waits for it (a backup's apply, nobody pulling there, can wait)
  // Async and SSP with replicas: the push's step, its acknowledgement (held
  // until applied here, and at the backup when forwarded), and the terms
  // decided on its arrival at its primary, applied as they are.
  uint32_t clock = 0;
  std::optional<HeldAck> ack{};
  std::optional<ArrivalTerms> final{};
  // Sync: the sum is multiplied by this. Each pusher scaled its gradient by
  // 1/workers; a step some left before pushing takes the mean of those in.
  double scale = 1;
};

// How an async or SSP push arrived, beyond its bytes.
struct AsyncPush {
  std::optional<HeldAck> ack{};        // held until applied (replicas); none: acknowledged at once
  std::optional<ArrivalTerms> final{};  // apply with these, as is (arrivalTerms, or the primary's)
};

class ChunkStore {
 public:
  // `name` ("ps 0") starts the errors it writes.
  explicit ChunkStore(std::string name) : name_(std::move(name)) {}

  // An init: `config`'s chunks, zeroed and not yet set. Throws Refusal,
  // changing nothing, when it lists a chunk twice. Chunks of a previous
  // init are retired, not freed: replies in flight may still point into them.
  void reset(const ServerConfig& config);
  // Throws the Refusal `reset` would, changing nothing.
  static void validate(const ServerConfig& config);
  bool initialized() const { return config_.has_value(); }
  const std::deque<ChunkState>& chunks() const { return chunks_; }
  const ChunkState& at(size_t index) const { return chunks_[index]; }

  // The chunk a request names; Refusal when it names none of ours.
  size_t indexOf(const net::FrameHeader& header) const;
  // Refusal unless `payload` (of a `type` request) is one chunk's values in `format`.
  void requirePayload(size_t index, net::MessageType type, std::span<const std::byte> payload,
                      const PushFormat& format) const;

  // ps-set: a chunk's starting values (and optimizer slots, resuming) at
  // update `clock`. Refusal when the payload is neither.
  void set(size_t index, uint32_t clock, std::span<const std::byte> payload);
  bool everyChunkSet() const;
  // Async replicas, a replacement: chunk `index` as its other holder has it
  // (values and slots after `head.applied` updates, and what each worker
  // pushed and pulled there). Refusal when the state is not one chunk's.
  void copyIn(size_t index, const CopyHead& head, std::span<const std::byte> state);
  // Async replicas, a holder copying a chunk to a replacement: what that
  // copy carries (the chunk must not be applying), and the pushes queued
  // behind the apply about to start, which go there as forwards.
  CopyHead copyHead(size_t index) const;
  std::deque<QueuedPush>& queued(size_t index) { return chunks_[index].queue; }

  // A worker's learning rate (ps-lr), used for its pushes from now on in
  // place of the table's.
  void setLr(int worker, double lr);
  // The rate ps-lr set for `worker`; none while it follows the table.
  std::optional<double> lrSent(int worker) const { return worker_lr_.at(static_cast<size_t>(worker)); }

  // Stores worker `worker`'s gradient for the chunk and returns the apply it
  // completes or starts, if any. The caller acknowledges the push at once,
  // or, when `holdsAcks()`, hands the acknowledgement to holdAck.
  // Sync: `clock` must be the chunk's step, from one of its pushers, once;
  // at a backup it may be the next step too, kept until this one applies.
  // The store keeps `grad` (and its owner) until the apply has read it.
  std::optional<ApplyJob> push(int worker, size_t index, uint32_t clock, OwnedBytes grad, int64_t received_us,
                               AsyncPush how = {});
  // Async and SSP: worker `worker`'s push of step `clock` reached the chunk
  // already (a backup that got it forwarded, then again from the worker
  // after the primary died).
  bool hasPush(size_t index, int worker, uint32_t clock) const;
  // Async and SSP: the update number the chunk's next push will be, and the
  // rate it will be applied with, staleness included. Worked out on arrival
  // it is the rate an apply would find: the pusher's next pull is answered
  // only after this push is applied.
  uint64_t nextUpdate(size_t index) const { return chunks_[index].received; }
  // Records the push's staleness here (the backup's record: recordForwarded).
  ArrivalTerms arrivalTerms(size_t index, int worker) const;
  void recordForwarded(const ArrivalTerms& terms) const;
  // With staleness-aware rates: how stale the pushes were, each counted
  // once, where its rate was decided (on arrival, or at its apply).
  StalenessCounts::Summary pushStaleness() const { return staleness_->summary(); }

  // Sync, a chunk held here as a backup: a push is acknowledged once its
  // step is applied here (the apply has read its bytes, and both holders
  // have it). A primary acknowledges at once: its window must move.
  bool holdsAcks(size_t index) const { return sync() && chunks_[index].backup; }
  // Keeps the acknowledgement of the push of step `clock` just stored
  // (routing, request id) until that step is applied (released by applied()).
  void holdAck(size_t index, uint32_t clock, std::string routing, uint64_t request_id);

  // Holds `pull` until the chunk can answer it: sync, once step `clock` is
  // applied; otherwise once everything received is (a worker always sees
  // its own last push), and for a snapshot, once the steps it includes are.
  // Returns the replies ready now: this pull's, or its error when a sync
  // worker has departed.
  std::vector<Reply> pull(size_t index, PendingPull pull, uint32_t clock);

  // Runs `job` on its chunk: any thread, while the chunk is busy. The sum
  // may be written into the first gradient's buffer.
  void apply(ApplyJob& job);

  // An apply finished (back on the I/O thread): the pulls it releases, and
  // the next queued push's apply (async and SSP).
  struct Applied {
    std::vector<Reply> replies{};
    std::optional<ApplyJob> next{};
  };
  Applied applied(size_t index);

  // Fails the pulls held past the peer timeout by `now` (every held pull,
  // once a sync worker departed), naming the pushes still missing.
  std::vector<Reply> expire(Clock::time_point now);

  // Sync, a replacement for a worker that died: no step waits for the dead
  // one any more (a push it made before it died stays in). Returns the
  // applies that completes.
  std::vector<ApplyJob> leave(int worker);
  // Sync: the replacement pushes from step `step` on. Refusal, changing
  // nothing, when a chunk it pushes is past that step already.
  void joinAt(int worker, uint32_t step);

  // A sync worker left to start again in place: from now on every pull that
  // must wait fails at once, naming it. False when nothing changes (not
  // sync, or someone already departed).
  bool depart(int worker);
  std::optional<int> departed() const { return departed_; }
  std::string departedText() const;

  // Whether the worker on `routing` has a pull held here (its silence is
  // then not death).
  bool holdsPullOf(const std::string& routing) const;
  // Whether any apply is running; `stopApplying` starts no more queued ones.
  bool busy() const;
  void stopApplying(bool stop) { stopping_ = stop; }

 private:
  bool sync() const { return config_->mode == Mode::PsSync; }
  bool compensating() const { return config_->delay_compensation > 0; }
  double lrOf(int worker, uint64_t lr_step) const;
  // Async and SSP: the schedule's rate for `worker`'s next push of the chunk.
  double scheduledRate(size_t index, int worker) const;
  // `lr` divided by the staleness of `worker`'s push as update `update`
  // (--staleness-lr: the updates since its pull); `lr` itself when off.
  // The rate and staleness of a push of `worker`'s as the chunk's update
  // `update`, recorded in the counts.
  ArrivalTerms staleTerms(const ChunkState& c, size_t worker, uint64_t update, double lr) const;
  std::optional<ApplyJob> startAsync(size_t index);
  // Sync: the apply of the chunk's step once every pusher's gradient is in.
  std::optional<ApplyJob> syncApplyIfComplete(size_t index);
  std::vector<Reply> answer(ChunkState& c);
  // Sync: whether step `step` of the chunk waits for `worker`'s push.
  bool awaits(int worker, uint64_t step) const { return joins_at_[static_cast<size_t>(worker)] <= step; }
  // Sync: whether every awaited push of the chunk's current step is in
  // (on every push: no allocation), and which are missing (for errors).
  bool stepComplete(const ChunkState& c) const;
  std::vector<int> missingPushers(const ChunkState& c) const;
  Reply error(const PendingPull& p, const std::string& reason) const;

  std::string name_;
  std::optional<ServerConfig> config_;
  std::unique_ptr<StalenessCounts> staleness_ = std::make_unique<StalenessCounts>();
  std::deque<ChunkState> chunks_;  // a deque: chunks never move once made
  std::vector<std::deque<ChunkState>> retired_;
  std::unordered_map<uint64_t, size_t> index_;
  std::vector<std::optional<double>> worker_lr_;  // rates sent with ps-lr; unset ones follow the table
  std::optional<int> departed_;
  // Sync: by worker, the first step it pushes (0, or a replacement's join
  // step; kLeft after its death, until its replacement joins).
  static constexpr uint32_t kLeft = 0xFFFFFFFF;
  std::vector<uint32_t> joins_at_;
  bool stopping_ = false;
};

}  // namespace tandem::ps
