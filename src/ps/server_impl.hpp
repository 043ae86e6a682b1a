#pragma once
// The parameter server's state and handlers, shared by its two halves:
// server.cpp (requests and the serve loop) and server_apply.cpp (applying
// updates, answering pulls and step clocks, timeouts).
#include <unistd.h>

#include <zmq.hpp>

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/log_limiter.hpp"
#include "core/clock.hpp"
#include "core/patient_wait.hpp"
#include "net/connection_watch.hpp"
#include "net/job_security.hpp"
#include "net/frame.hpp"
#include "net/shared_arena.hpp"
#include "ps/admission.hpp"
#include "ps/apply_pool.hpp"
#include "ps/chunk_store.hpp"
#include "ps/protocol.hpp"
#include "ps/server.hpp"
#include "ps/server_stats.hpp"
#include "ps/step_clocks.hpp"
#include "ps/worker_liveness.hpp"
#include "ps/worker_registry.hpp"

namespace tandem::ps {
namespace detail {

struct Completion {
  size_t chunk = 0;
  double seconds = 0;
};

}  // namespace detail

struct ParameterServer::Impl {
  using MessageType = net::MessageType;
  using Completion = detail::Completion;

  ServerOptions options;
  std::string name;
  // Chunk memory outlives the socket: zero-copy replies point into it.
  ChunkStore store{""};
  zmq::context_t context{1};
  std::unique_ptr<net::ZapHandler> zap;  // admits the job's members; outlives the router
  // The job's port (CURVE when secure) and, for a loopback server, its
  // same-host Unix socket (a private directory instead of CURVE).
  zmq::socket_t router{context, zmq::socket_type::router};
  std::optional<zmq::socket_t> local_router;
  std::string local_endpoint;  // ipc://...; empty without local_router
  // Peers that came in on local_router, by routing id; the rest on router.
  std::unordered_map<std::string, zmq::socket_t*> reply_socket;
  // Closing waits for workers to hang up, on either socket.
  std::unique_ptr<net::ConnectionWatch> connections, local_connections;
  int openConnections() {
    return connections->open() + (local_connections ? local_connections->open() : 0);
  }
  int port = 0;
  int wake_fd = -1;
  LogLimiter reject_log;  // what any peer can make the server say, at a bounded rate
  std::mutex completions_mutex;
  std::vector<Completion> completions;
  std::unique_ptr<ApplyPool> pool;

  std::optional<ServerConfig> config;
  Admission admission;  // the init's start, and the hellos held until it is ready
  WorkerRegistry workers;
  int apply_threads = 1;
  std::optional<StepClocks> clocks;  // from init; only ps 0 gets reports
  // By worker: sends this server something every step (a push here, or at
  // ps 0 its step report). Hierarchical sync jobs push each chunk through
  // one worker a host, so at other servers the rest may say nothing
  // between their hello and their goodbye.
  std::vector<char> heard_every_step;
  // By worker: the shared memory of a worker on this host (ps-hello), which
  // its pushes and pulls may then name instead of carrying bytes.
  std::unordered_map<int, std::shared_ptr<net::SharedArena>> arenas;
  // When to give up on a silent worker (from init: the peer timeout).
  std::optional<WorkerLiveness> liveness;

  ServerStats stats;

  // Timeline lanes of a server, and the clock that is 0 without a timeline.
  static constexpr auto kRequestLane = obs::Lane::kLoop;
  static constexpr auto kApplyLane = obs::Lane::kComm;
  static constexpr auto kPullLane = obs::Lane::kBackward;
  int64_t timelineNow() const { return options.timeline != nullptr ? obs::Timeline::nowUs() : 0; }

  // `shared_bytes`: values written into the worker's shared memory, whose
  // reference `payload` is; they count as the payload's bytes.
  void reply(const std::string& routing, net::FrameHeader header, zmq::message_t payload, uint64_t shared_bytes = 0) {
    // A worker's silence counts from the last exchange, not its last request:
    // time it spent waiting on us is not silence.
    workers.touch(routing, false);
    zmq::message_t id(routing.data(), routing.size());
    stats.bytes_out += shared_bytes > 0 ? shared_bytes : payload.size();
    stats.shared_bytes_out += shared_bytes;
    const auto local = reply_socket.find(routing);
    net::sendFrame(local == reply_socket.end() ? router : *local->second, header, std::move(payload), &id);
  }

  void replyOk(const std::string& routing, uint64_t request_id) {
    reply(routing, {.type = MessageType::kOk, .request_id = request_id}, zmq::message_t());
  }

  void replyError(const std::string& routing, uint64_t request_id, const std::string& reason) {
    reply(routing, {.type = MessageType::kError, .request_id = request_id}, net::copyPayload(reason));
  }

  // Pull answers and the errors that fail held pulls.
  void send(std::vector<Reply> replies);

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof(one));
  }

  // --- requests (server.cpp) ------------------------------------------------
  int workerOf(const std::string& routing, MessageType type);
  void onInit(const std::string& routing, net::Frame& f);
  // Forgets the job's previous start (a chief that failed and started
  // again): waits for running applies, retires the chunks, drops the
  // workers, clocks and held requests, whose senders are gone.
  void startOver();
  void onSet(const std::string& routing, net::Frame& f);
  void checkReady();
  void onHello(const std::string& routing, net::Frame& f);
  // Binds the hello's worker to `routing` and answers it: on ps 0 with the
  // steps that worker has finished (a replacement continues from there).
  void registerWorker(const std::string& routing, uint64_t request_id, const Hello& h);
  // Maps a same-host worker's offered shared memory; false when it has none
  // or it cannot be mapped here (the worker then sends bytes).
  bool mapArena(const std::string& routing, int worker, const Hello& h);
  // The bytes of worker `w`'s shared memory that `f` (flagged
  // kFlagInArena) names, at most `most` of them; a Refusal names the worker.
  ArenaDestination namedArenaBytes(int w, const net::Frame& f, size_t most);
  void onPush(const std::string& routing, net::Frame& f);
  void onPull(const std::string& routing, net::Frame& f);
  void onClock(const std::string& routing, net::Frame& f);
  void onAwait(const std::string& routing, net::Frame& f);
  void onHold(const std::string& routing, net::Frame& f);  // ps-hold and ps-release
  void onDone(const std::string& routing, net::Frame& f);
  void onLeave(const std::string& routing, net::Frame& f);
  void onLr(const std::string& routing, net::Frame& f);

  // --- applying, pulls, clocks and timeouts (server_apply.cpp) --------------
  void finishJob(size_t index, Stopwatch& watch);
  // On an apply job's thread: the apply's span from construction to
  // destruction, and each consumed push's time in the queue before it.
  class TimelineApply {
   public:
    TimelineApply(Impl& server, uint64_t key, uint64_t update);
    ~TimelineApply();
    void queued(int worker, int64_t received_us);

   private:
    obs::Timeline* timeline_;
    uint64_t key_;
    uint64_t update_;
    int64_t start_us_;
  };
  // Runs the store's apply on the pool; its completion comes back through
  // drainCompletions.
  void submit(std::optional<ApplyJob> job);
  void drainCompletions();
  void answerClocks();
  // Names the workers holding up a step wait: first in a warning once the
  // wait runs long, then in the error that fails it at the peer timeout,
  // or at once after a sync worker departed.
  void expireClockWaits();
  // Whether a worker is blocked on us (a step wait or a pull): silence then
  // is not death.
  bool isWaiting(int w) const;
  // Gives up on the workers `liveness` finds lost; true when every worker
  // is done or lost.
  bool everyoneGone();

  // --- the loop (server.cpp) ------------------------------------------------
  void handle(std::vector<zmq::message_t>& parts, size_t total);
  // A line every `interval` while serving, so a long run shows it is alive.
  void reportProgress(Clock::time_point& last, std::chrono::seconds interval);
  nlohmann::json summary(double wall_seconds) const;
};

}  // namespace tandem::ps
