#pragma once
// A worker's side of the parameter-server protocol, torch-free (ps-lite's
// KVWorker vocabulary): the chief initialises the servers, every worker says
// hello, pushes chunks as backward completes them, reports its step clock,
// pulls chunks back and says goodbye. The caller owns the floats; this class
// owns the wire: chunk headers, tickets, deadlines and what a timeout names.
//
// Thread-safety: push() may be called from a gradient-capture thread while
// the training thread is in any other call; everything else belongs to one
// thread at a time.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/bytes.hpp"

#include "core/deadline.hpp"
#include "core/wire_encoder.hpp"
#include "net/frame.hpp"
#include "net/shared_arena.hpp"
#include "obs/timeline.hpp"
#include "ps/client.hpp"
#include "ps/key_layout.hpp"
#include "ps/protocol.hpp"

namespace tandem::ps {

struct WorkerOptions {
  std::vector<ServerAddress> servers;
  KeyLayout layout;
  Mode mode = Mode::PsSync;
  uint32_t index = 0;  // this worker's index
  WireDtype wire = WireDtype::kFloat32;  // pushes and pulls; the servers' config says the same
  // Priority scheduling (P3): at most this many bytes of pushes (with their
  // pulls) in flight per server; the rest wait here and go out lowest chunk
  // first, i.e. in the order the next forward needs them. 0: every push goes
  // out at once, in the order backward completes them.
  size_t push_window_bytes = 0;
  Liveness liveness = {};  // how a dead server is told from a slow one
  uint64_t generation = 0;  // the chief's start this worker joined (cluster/job_start.hpp)
  // Servers on this host (same-host endpoints) may map this worker's shared
  // memory: pushes from sharedArena() and every pull then cross without
  // socket copies. Servers that cannot map it get bytes as before.
  bool shared_memory = false;
  // A 16-bit wire carries each push's rounding into the chunk's next push
  // (--error-feedback); quantised pushes always do.
  bool error_feedback = false;
  obs::Timeline* timeline = nullptr;  // --timeline: pushes, pulls and step ends on the communication lane
  int push_bits = 0;  // 8 or 4: pushes quantised, with error feedback (core/push_format.hpp)
  // Started into a running job (a replacement): with async replicas, a
  // server that does not answer at its address within 5 s, or a
  // replacement there that the chief has not set up, is set aside as lost,
  // since its chunks' other holders carry them.
  bool joining = false;

  PushFormat pushFormat() const { return {wire, push_bits}; }
};

// The window priority scheduling uses by default: two of the largest chunks
// per server, one on the wire and one queued behind it, so the link never
// idles while a later-needed chunk cannot overtake more than one. Shared
// among the `pushers` workers of one host that push to the same server (at
// least one chunk each), since they all queue on that host's link: in the
// lab, flat 4 x 4 workers with two chunks each overflowed its queue.
size_t defaultPushWindow(const KeyLayout& layout, WireDtype wire, size_t pushers = 1);

// The most workers of `host` (this worker's host, `worker` among them) that
// push to one of the servers `worker` pushes to: all of them in the flat
// layout; with host sums (`hierarchical`), the owners of that server's
// chunks (chunk c is host[c % host.size()]'s, pusherRank).
size_t hostPushersPerServer(const KeyLayout& layout, const std::vector<int>& host, int worker, bool hierarchical);

// A pulled chunk's values as they arrived: `count` values in `wire`,
// checked for size. Valid only during the sink call that receives it.
struct PulledValues {
  const void* data = nullptr;
  size_t count = 0;
  WireDtype wire = WireDtype::kFloat32;
};

// A chunk's state as a server holds it (fetchState): its float32 values
// and optimizer slots, each `length` floats, and the updates it had.
struct FetchedState {
  int64_t clock = 0;  // updates applied to the chunk
  std::span<const float> values() const { return slot(-1); }
  // Optimizer slot k (0-based: SGD's momentum; Adam's first and second moments).
  std::span<const float> slot(int k) const {
    return {floats_.data() + static_cast<size_t>(k + 1) * length_, length_};
  }

 private:
  friend class Worker;
  SharedBytes bytes_;                 // keeps floats_ alive
  std::span<const float> floats_{};   // values, then the slots
  size_t length_ = 0;
};

// A step report on its way to the servers that keep the step clocks: ps 0,
// and with --ps-replicas 2 ps 1 too; the answer of the first one alive counts.
struct ReportTickets {
  std::vector<std::pair<int, Ticket>> by_keeper;  // (server, ticket), ps 0 first
  std::vector<char> payload;  // the report, to send again to a keeper turned to
};

class Worker {
 public:
  // `security`: the job's, for its connections to the servers.
  Worker(WorkerOptions options, net::JobSecurity security);
  ~Worker();  // hangs up; see sayDone for leaving politely
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const KeyLayout& layout() const { return options_.layout; }
  // With shared_memory and a server on this host: the arena whose first
  // layout().total_floats floats are where gradients should be written, so
  // that their pushes go by reference (data inside it). Else null.
  const std::shared_ptr<net::SharedArena>& sharedArena() const { return arena_; }
  // Servers that mapped the arena (known after hello()).
  int serversSharingMemory() const;
  // Where those servers write pulled values: the whole model in key order,
  // in the wire dtype, after the gradients. Null without an arena.
  std::byte* pullLanding() const;
  Mode mode() const { return options_.mode; }
  int servers() const { return static_cast<int>(options_.servers.size()); }

  // Chief only: each server's config, then every chunk's values. `values`
  // returns chunk c's floats (the values, or values plus optimizer slots
  // when resuming) and sets `applied` to the updates it already had.
  // Throws PeerError naming a server that did not answer by `deadline`.
  using ChunkValues = std::function<std::vector<float>(size_t chunk, int64_t& applied)>;
  void initServers(const std::vector<ServerConfig>& configs, const ChunkValues& values, Deadline deadline);
  // A chief started into the running job sets no server up, but keeps the
  // configs to set a lost server's replacement up alike.
  void rememberServerConfigs(std::vector<ServerConfig> configs);

  // Introduces this worker to every server; they answer once initialised.
  // Returns ps 0's answer: this worker's clock is the start step, or, for a
  // replacement joining a running async or SSP job, its predecessor's,
  // which it continues from. Throws InputError on a malformed answer.
  // `replaces_sync_worker`: a replacement for a sync worker that died; it
  // asks the first step-clock keeper where it joins and tells the others.
  HelloAnswer hello(Deadline deadline, bool replaces_sync_worker = false);

  // Pushes chunk `c`'s float32 gradient for `step`. Float32 goes zero-copy:
  // the chunk's floats at `grad` must stay unchanged until the next
  // awaitPushes() returns. A 16-bit wire rounds them into the chunk's own
  // buffer here (with error feedback, plus what its last push lost).
  // Sync and async modes also ask for the chunk back at once (the server
  // answers once the update is applied); SSP pulls after reportStep().
  void push(size_t c, const float* grad, int64_t step);

  // Asks every server for every chunk: the version that step `needed` starts
  // from (sync), or whatever has been received (0, async and SSP).
  void pullAll(int64_t needed);

  // Waits for the pulls of chunks [0, end) in flight (or still queued behind
  // the push window), in key order, and hands each chunk's values (in the
  // wire dtype, from the reply or from shared memory) to `sink`, which must
  // copy what it needs. Chunks not pulled since the last call are skipped,
  // so growing `end` receives the model in stages. Throws PeerError naming
  // the chunk and server when one is late or the wrong size.
  using PullSink = std::function<void(size_t chunk, const PulledValues& values)>;
  void receivePulls(Deadline deadline, int64_t step, const PullSink& sink, size_t end = SIZE_MAX);

  // Tells ps 0 this worker finished step `finished`; returns when the job
  // lets it go on (sync: every worker finished; SSP: within the bound).
  StepAgreement reportStep(int64_t finished, const StepReport& report, Deadline deadline);
  // reportStep in two halves: the agreement may be awaited steps after the
  // report (streaming DiLoCo overlaps it with training).
  ReportTickets sendReport(int64_t finished, const StepReport& report);
  StepAgreement awaitReport(ReportTickets& clock, int64_t finished, Deadline deadline);

  // Waits for every push of `step` (and any learning-rate change) to be
  // taken by its server.
  void awaitPushes(Deadline deadline, int64_t step);

  // Async and SSP, at the end: waits for the others' last steps; returns
  // the job's global step.
  StepAgreement awaitWorkers(int64_t step, Deadline deadline);

  // Every chunk's values and its optimizer's `slots` slots, at `version`
  // (sync: after that step; 0: whatever is applied), in key order. With a
  // snapshot point (async, SSP: from holdForSnapshot), each chunk as of
  // every worker's pushes up to its clock there, and no later ones. Throws
  // PeerError naming the server that sends another size.
  // `wanted`, when set, picks the chunks to fetch; the others stay empty.
  std::vector<FetchedState> fetchState(int64_t version, int slots, Deadline deadline,
                                     const SnapshotPoint* snapshot = nullptr,
                                     const std::function<bool(size_t)>& wanted = {});

  // Async and SSP, the chief before a checkpoint: ps 0 holds every other
  // worker at its next step boundary and answers with where the job
  // stands once all wait. releaseSnapshot() lets them go on (so does this
  // worker's next report). Throws PeerError naming ps 0 at the deadline.
  SnapshotPoint holdForSnapshot(Deadline deadline);
  void releaseSnapshot(Deadline deadline);

  // Sends `lr` to every server ahead of this step's pushes (the APIs' own
  // schedules). Unchanged values are not sent again.
  void setLearningRate(double lr);
  // Tells every server this worker is alive (ps-alive), between steps that
  // send them nothing; the answers are awaited with the next step's pushes.
  void sayAlive();

  // Says goodbye to every server (they stop waiting for this worker), then
  // hangs up. Safe to repeat.
  void sayDone(Deadline deadline);
  // A sync worker about to start again in place: tells every server that
  // answers by `deadline` that this start lost it (their waits for it fail
  // at once), then hangs up. A server that does not answer is skipped.
  void sayLeaving(Deadline deadline);
  bool done() const { return done_; }
  // Servers lost while their chunks went on at another replica
  // (--ps-replicas 2), in the order they were lost (twice if lost again).
  std::vector<int> lostServers() const;

  // Replacement servers (ps/worker_replacement.cpp), sync with --ps-replicas 2.
  // The chief between steps: a lost server whose address now answers with a
  // fresh server (the launcher started one in its place), found by asking
  // it ps-status over a connection of its own; nullopt while none does.
  // Never waits.
  std::optional<int> replacementWaiting();
  // Every worker, once the agreement of step `step` names `server`, before
  // its next push: the chief first sets the replacement up as a resume
  // would, with its chunks' values and optimizer state after `step` from
  // their other holder; then each worker connects to it anew and says
  // hello, and pushes and reports to it from the next step on. Throws
  // PeerError naming the server when it does not answer by `deadline`.
  void takeBackServer(int server, int64_t step, Deadline deadline);
  // Servers taken back, in order.
  std::vector<int> rejoinedServers() const;
  // The chief between steps, async and SSP with --ps-replicas 2: a lost
  // server's replacement waiting fresh at its address is initialised and
  // brought up by the live holders of its chunks, which copy it their
  // state and forward it their pushes from then on. The workers go on
  // with those holders and turn to it only when one of them dies. Never
  // waits for a replacement; waits for its init and the holders' answers.
  // True when it brought one up now.
  bool bringUpReplacement(Deadline deadline);

 private:
  void sayToEveryServer(net::MessageType type, Deadline deadline, const char* what, bool skip_silent);
  Ticket sendHello(int server, uint32_t sync_join = Hello::kNotJoining);
  // A revived server's hello, answered by `deadline`: whether it maps this
  // worker's shared memory, and that it is taken back (rejoinedServers).
  void greetRevived(int server, Deadline deadline, const std::string& what);
  // A step report to keeper `keeper`.
  Ticket sendReportTo(int keeper, int64_t finished, const std::vector<char>& payload);
  // Replicas, a joining worker (async and SSP: any; sync: a replacement):
  // sets aside the servers nobody answers for at their address within 5 s.
  void setAsideSilentServers();
  // Whether every chunk `server` holds has another holder this worker has not set aside or lost.
  bool othersHoldEveryChunkOf(int server) const;
  // The chief: `server`'s init and chunks, as the other holders have them after `step`.
  void setUpReplacement(int server, int64_t step, const std::vector<FetchedState>& states, Deadline deadline);
  net::FrameHeader chunkHeader(net::MessageType type, size_t c, int64_t clock) const;
  int serverOf(size_t c) const { return options_.layout.chunks[c].server; }
  // The holder of chunk c that pulls and states go to: its primary while
  // that lives, else its backup; the primary when every holder is lost (a
  // request there fails at once).
  int pullTarget(size_t c) const;
  // A request for chunk c to `server` failed with `failure`: returns when
  // another holder of c lives (failOver); else throws `failure`, or when
  // both holders are lost an error naming them.
  void rethrowUnlessHeld(size_t c, int server, const PeerError& failure);
  // A request to `server` failed: whether that is because the server is
  // lost and chunk c (SIZE_MAX: the clocks) has another holder alive, which
  // is then announced once; false means the failure stands.
  // Async and SSP with replicas: the primary forwards each push to the
  // chunk's backup, in the order it applies them, so a worker pushes to the
  // primary alone while it lives.
  bool primaryForwards() const { return options_.layout.replicas() > 1 && options_.mode != Mode::PsSync; }
  // The primary of chunk `c` is lost with this step's push unanswered or
  // answered: the backup gets it from this worker (once: it drops a push it
  // was already forwarded). Call with window_mutex_ held.
  void repushToBackup(size_t c);
  // Async replicas: repushToBackup for every chunk whose primary is lost
  // with this step's push outstanding. Run while a step report waits: a
  // checkpoint's hold answers it only once the pushes it reports are in.
  void repushPastLostPrimaries();
  // Sends `header` to the first step-clock keeper alive (ps 0, then ps 1
  // with replicas) and returns which answered, and how.
  std::pair<int, net::Frame> askClockKeeper(net::FrameHeader header, Deadline deadline, const std::string& what);
  bool failOver(int server, size_t c);
  // Async replicas: a lost server whose replacement was brought up (ready,
  // copied from the live holders) takes this worker's requests from now
  // on; false when none answers there ready.
  bool turnToReplacement(int server);
  // The first step-clock keeper alive, or a replacement of one turned to; -1: none.
  int liveKeeper();
  // Says once that `server` is lost and its chunks go on at their other replica.
  void noteLost(int server) const;
  void pull(size_t c, int64_t needed);
  void sendPull(size_t c, int64_t needed);   // under window_mutex_: to pullTarget(c)
  void sendPush(size_t c, size_t replica);  // under window_mutex_
  void pushTaken(int server, size_t bytes);  // I/O thread: the window moves on
  // Waits until chunk c's push has left every holder's window.
  void waitSent(size_t c, Deadline deadline, const std::string& what);
  void trace(const char* what, size_t c, int server, size_t bytes, const Ticket& ticket, int64_t step) const;
  size_t chunkWireBytes(size_t c) const {
    return static_cast<size_t>(options_.layout.chunks[c].length) * wireBytes(options_.wire);
  }
  size_t chunkPushBytes(size_t c) const {
    return options_.pushFormat().bytes(static_cast<size_t>(options_.layout.chunks[c].length));
  }
  // Chunk c's pull lands here in the arena, after the gradients.
  net::ArenaRef pullRef(size_t c) const;
  uint64_t landingOffset() const;
  // The payload of a request for chunk c: a reference into the arena when
  // its server mapped it and `data` lies there, else the bytes (zero-copy).
  zmq::message_t pushPayload(size_t c, int server, const void* data, net::FrameHeader& header) const;
  zmq::message_t pullPayload(size_t c, int server, net::FrameHeader& header) const;
  bool sharesWith(int server) const { return !arena_mapped_.empty() && arena_mapped_[static_cast<size_t>(server)]; }

  WorkerOptions options_;
  net::JobSecurity security_;  // a probe of a lost server's address connects with it
  std::vector<ServerConfig> configs_;  // the chief's inits, to set a replacement up alike
  // The chief's question to a lost server's address: is a fresh server there?
  struct Probe {
    int server = -1;
    std::unique_ptr<PsClient> client;
    Ticket status;
    bool fresh = false;  // it answered: not yet initialised
  };
  std::optional<Probe> probe_;
  std::set<int> not_replaceable_;  // addresses that answered with a server already set up
  // The chief, async replicas: replacements it brought up, by server, with
  // the connection that watches each (lost: it died, probe again).
  std::map<int, std::unique_ptr<PsClient>> brought_up_;
  std::optional<WireEncoder> encoder_;       // encoded pushes: a buffer (and residuals) by chunk
  std::shared_ptr<net::SharedArena> arena_;  // [gradients: float32][pulls: wire dtype]
  std::vector<bool> arena_mapped_;           // by server, from its hello answer
  std::unique_ptr<PsClient> client_;
  // Pushes and pulls are sent by the capture thread or, behind the window,
  // by the client's I/O thread: their tickets are guarded by window_mutex_.
  mutable std::mutex window_mutex_;
  std::condition_variable window_cv_;
  std::vector<std::vector<Ticket>> push_tickets_;  // by chunk, by holder (primary first)
  std::vector<Ticket> pull_tickets_;
  struct SentPull {
    int server = -1;
    int64_t needed = 0;
    bool to_lost = false;  // sent while that server was lost (every holder was)
  };
  std::vector<SentPull> pull_sent_;  // by chunk: where its pull went, to send again at a failover
  std::vector<std::pair<int, Ticket>> notice_tickets_;  // learning rates and ps-alive, awaited with a step's pushes
  std::vector<bool> pull_expected_;  // by chunk: a pull is owed (maybe not yet sent)
  struct Pending {
    const void* data = nullptr;
    int64_t step = 0;
    std::optional<int64_t> pull_needed;  // the pull to send right behind the push
    int unsent = 0;  // holders whose window the push still waits for
  };
  std::vector<Pending> pending_;            // by chunk: a push waiting for the window
  // Async and SSP with replicas: by chunk, this step's push (its bytes and
  // step), sent again to the backup when the primary dies before answering.
  std::vector<std::pair<const void*, int64_t>> pushed_;
  std::vector<std::set<size_t>> waiting_;   // by server: queued chunks, lowest first
  std::vector<size_t> in_flight_bytes_;     // by server
  bool closing_ = false;
  std::optional<double> sent_lr_;
  bool done_ = false;
  // Lost servers whose chunks went on at another replica, each announced
  // once while it stays lost; every loss, and every server taken back.
  mutable std::mutex lost_mutex_;
  mutable std::vector<int> announced_lost_;
  mutable std::vector<int> losses_;
  std::vector<int> rejoined_;
};

}  // namespace tandem::ps
