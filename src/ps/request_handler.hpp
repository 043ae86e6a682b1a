#pragma once
// What a parameter server does with each request, without its sockets:
// ps-lite's request handler. The server's I/O loop (server.cpp) receives a
// frame, hands it to `handle` with the time, and sends what comes back; it
// runs the applies the handler asks for on its pool and reports each one's
// end to `applied`; a few times a second it calls `tick` for the timeouts.
// The handler owns the job's state: the chunks (ChunkStore), who is
// admitted, the workers and their liveness, ps 0's step clocks, the
// counters. So a test can play any sequence of requests, completions and
// times against it with no socket and no thread.
//
// Not thread-safe: the I/O thread calls everything except `apply`, which
// a pool thread runs on a chunk the handler marked busy.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/bytes.hpp"
#include "core/clock.hpp"
#include "core/log_limiter.hpp"
#include "net/shared_arena.hpp"
#include "obs/timeline.hpp"
#include "ps/admission.hpp"
#include "ps/chunk_store.hpp"
#include "ps/protocol.hpp"
#include "ps/replica_forwarding.hpp"
#include "ps/server_stats.hpp"
#include "ps/step_clocks.hpp"
#include "ps/worker_liveness.hpp"
#include "ps/worker_registry.hpp"

namespace tandem::ps {

// One received, validated frame.
struct Request {
  std::string routing;
  net::FrameHeader header{};
  // Kept (a push's gradient) by sharing its owner; an apply may overwrite it.
  OwnedBytes payload{};
  // It came over the same-host socket: only such a worker's shared memory
  // names a process on this host.
  bool same_host = false;
};

// A push applied here that goes on to the backup of its chunk (async and
// SSP, --ps-replicas 2); its outcome comes back through `forwarded(id)`.
struct Forward {
  uint64_t id = 0;
  int to = 0;  // the destination (RequestHandler::destination)
  net::FrameHeader header{};
  std::vector<char> payload;
};

// What the I/O loop is to do after a call: send the replies in order, then
// the forwards, then run the applies on the pool.
struct Outbox {
  std::vector<Reply> replies;
  std::vector<ApplyJob> applies;
  std::vector<Forward> forwards;
  // The chief started over while applies run: nothing changed; hand the
  // same request back once `applying()` is false (the loop waits, sending
  // what their completions release).
  bool retry_when_idle = false;
};

class RequestHandler {
 public:
  struct Options {
    int index = 0;  // this server's among the PS tasks; ps 0 keeps the step clocks
    uint64_t max_payload_bytes = net::kMaxPayloadBytes;
    int apply_threads = 1;                // for the log and the summary
    obs::Timeline* timeline = nullptr;   // stamps arrivals for the spans the loop writes
  };

  explicit RequestHandler(Options options);

  const std::string& name() const { return name_; }  // "ps 0"
  // Whether the chief's init has arrived (a job to finish).
  bool initialised() const { return config_.has_value(); }
  // How errors and logs name the peer on `routing`.
  std::string peerName(const std::string& routing) const { return workers_.nameOf(routing); }

  // One request. Its refusal (bad payload, wrong order, unknown chunk) is
  // an error reply to it; the handler stays as it was for everyone else.
  Outbox handle(const Request& request, Clock::time_point now);
  // A frame that failed validation before it became a request.
  Outbox refuseFrame(const std::string& routing, uint64_t request_id, const std::string& reason);

  // Runs `job` on its chunk: any thread, while the chunk is busy.
  void apply(ApplyJob& job) { store_.apply(job); }
  // How an apply's failure names it.
  std::string describe(const ApplyJob& job) const;
  // An apply ended (`seconds` long): the pulls it releases, the next apply,
  // and with async replicas its acknowledgement or its forward.
  Outbox applied(ApplyJob& job, double seconds);

  // Async and SSP with --ps-replicas 2: a server this one's pushes go on
  // to (the backup of its own chunks, or a replacement it copied chunks
  // to); null once it is lost.
  using Destination = ReplicaForwarding::Destination;
  const Destination* destination(int d) const { return forwarding_.destination(d); }
  // A forward's outcome: applied at its destination `to` (`failure` empty),
  // refused there, or `to` is `lost`. A lost destination is forwarded
  // nothing more, and every acknowledgement held for it goes out: this
  // server has the updates, and the job goes on with one copy of those chunks.
  Outbox forwarded(uint64_t id, int to, const std::string& failure, bool lost);
  bool applying() const { return store_.busy(); }
  // Starts no queued apply from now on (the server is closing).
  void stopApplying() { store_.stopApplying(true); }

  // Timeouts: held steps and pulls that waited too long fail, naming who
  // they wait for; silent workers are given up on. A progress line every
  // 30 s. `everyone_gone`: every worker is done or lost.
  struct Tick {
    Outbox out;
    bool everyone_gone = false;
  };
  Tick tick(Clock::time_point now);

  // The summary serve() returns.
  nlohmann::json summary(double wall_seconds) const;
  // With momentum correction: the momentum (or Adam's beta1) given, the
  // one applied at the staleness measured so far, and that staleness.
  nlohmann::json momentumCorrection() const;
  // push_staleness and momentum_correction, where on: the summary's, and what the progress line says.
  nlohmann::json stalenessSummary() const;

 private:
  using MessageType = net::MessageType;

  // Every reply goes through here: the exchange counts as hearing from the
  // worker (time it waited on us is not silence), and its bytes are counted.
  void reply(Outbox& out, Reply r);
  // kOk, carrying `payload` (an encoded answer) when there is one.
  void replyOk(Outbox& out, const std::string& routing, uint64_t request_id, const std::vector<char>& payload = {});
  void replyError(Outbox& out, const std::string& routing, uint64_t request_id, const std::string& reason);
  void replies(Outbox& out, std::vector<Reply> rs);
  // ps 0, and with --ps-replicas 2 ps 1 as well: every worker reports its
  // steps here, so either may answer them.
  bool keepsClocks() const { return config_ && options_.index < config_->replicas; }
  int64_t timelineNow() const { return options_.timeline != nullptr ? obs::Timeline::nowUs() : 0; }

  void dispatch(Outbox& out, const Request& r, Clock::time_point now);
  int workerOf(const std::string& routing, MessageType type);
  void onInit(Outbox& out, const Request& r);
  void onSet(Outbox& out, const Request& r);
  void checkReady(Outbox& out);
  void onHello(Outbox& out, const Request& r);
  // Binds the hello's worker to `routing` and answers it: on ps 0 with the
  // steps that worker has finished (a replacement continues from there).
  void registerWorker(Outbox& out, const Admission::HeldHello& held);
  // Sync: a replacement for a worker that died. Nothing waits for the dead
  // one any more; the replacement pushes from the step it joins at, which
  // the first step-clock keeper chooses and the hello carries elsewhere.
  // Its answer's clock is the step before that one.
  void joinSync(Outbox& out, const Hello& h, HelloAnswer& answer);
  // Maps a same-host worker's offered shared memory; false when it has none
  // or it cannot be mapped here (the worker then sends bytes).
  bool mapArena(int worker, const Hello& h, bool same_host);
  // The bytes of worker `w`'s shared memory that `r` (flagged kFlagInArena)
  // names, at most `most` of them; a Refusal names the worker.
  ArenaDestination namedArenaBytes(int w, const Request& r, size_t most);
  void onPush(Outbox& out, const Request& r);
  void onForward(Outbox& out, const Request& r);
  // An async push on a chunk this server is the primary of, with its
  // backup alive: it goes on there now, applied on both at once, and is
  // acknowledged once both have applied it. Returns what the acknowledgement waits for.
  HeldAck forward(Outbox& out, const Request& r, size_t index, int worker, const ArrivalTerms& terms,
                  std::span<const std::byte> grad);
  // A replacement's side: the chief's ps-replicate at a live holder, a
  // holder's ps-copy of one chunk, and its ps-mirror of the workers.
  // Refusal naming `what` unless this server serves an async or SSP job with replicas.
  void requireAsyncReplicas(const char* what) const;
  void onReplicate(Outbox& out, const Request& r);
  void onCopy(Outbox& out, const Request& r);
  void onMirror(Outbox& out, const Request& r);
  // Copies chunk `index` (not applying) to destination `to`: its state,
  // then as forwards the pushes after it, `next` (the apply about to
  // start, if any) and those queued; its later pushes go there too.
  void copyChunk(Outbox& out, size_t index, int to, ApplyJob* next);
  // Sends where the workers stand to every replacement alive.
  void mirrorWorkers(Outbox& out);
  // An acknowledgement that waited for an apply here: it goes out, or, if
  // it waits for the backup too, once the backup answered.
  void acknowledgeApplied(Outbox& out, HeldAck ack);
  void onPull(Outbox& out, const Request& r, Clock::time_point now);
  void onStepClock(Outbox& out, const Request& r);  // ps-clock, ps-await-workers, ps-hold, ps-release (ps 0)
  void onDone(Outbox& out, const Request& r);
  void onLeave(Outbox& out, const Request& r, Clock::time_point now);
  void onLr(Outbox& out, const Request& r);

  void answerClocks(Outbox& out);
  // Names the workers holding up a step wait: first in a warning once the
  // wait runs long, then in the error that fails it at the peer timeout,
  // or at once after a sync worker departed.
  void expireClockWaits(Outbox& out);
  // Gives up on the workers `liveness_` finds lost; true when every worker
  // is done or lost.
  bool everyoneGone(Outbox& out, Clock::time_point now);
  void reportProgress(Clock::time_point now);
  // Replicas: each chunk's digest and updates, for the summary.
  nlohmann::json chunkDigests() const;

  Options options_;
  std::string name_;
  ChunkStore store_;
  std::optional<ServerConfig> config_;
  Admission admission_;  // the init's start, and the hellos held until it is ready
  WorkerRegistry workers_;
  std::optional<StepClocks> clocks_;  // from init; only ps 0 gets reports
  // By worker: sends this server something every step (a push here, or at
  // ps 0 its step report). Hierarchical sync jobs push each chunk through
  // one worker a host, so at other servers the rest may say nothing
  // between their hello and their goodbye.
  std::vector<char> heard_every_step_;
  // By worker: the shared memory of a worker on this host (ps-hello), which
  // its pushes and pulls may then name instead of carrying bytes.
  std::unordered_map<int, std::shared_ptr<net::SharedArena>> arenas_;
  std::optional<WorkerLiveness> liveness_;  // from init: the peer timeout
  ReplicaForwarding forwarding_;  // from init: async replicas
  // By chunk: the destination its pushes are forwarded to (-1: none), and
  // one it is to be copied to once its running apply ends (-1: none).
  std::vector<int> forward_to_, copy_to_;
  // A replacement copied from the other holders, which still feed it:
  // workers saying hello set it aside until those die.
  bool fed_ = false;
  LogLimiter reject_log_;  // what any peer can make the server say, at a bounded rate
  ServerStats stats_;
  Clock::time_point last_report_ = Clock::now();
};

}  // namespace tandem::ps
