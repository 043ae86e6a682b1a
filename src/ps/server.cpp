// The parameter server's I/O: sockets in, the request handler's replies
// out, applies on the pool. Everything the job decides lives in
// RequestHandler (ps/request_handler.hpp); this file owns only what touches
// the operating system: the ROUTER sockets and their connection watches,
// which socket each peer came in on, the eventfd the pool wakes the loop
// with, and the pool itself.
#include "ps/server.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/patient_wait.hpp"
#include "core/stop_request.hpp"
#include "net/connection_watch.hpp"
#include "ps/apply_pool.hpp"
#include "ps/client.hpp"
#include "ps/messages.hpp"
#include "ps/request_handler.hpp"

namespace tandem::ps {
namespace {

constexpr int kMaxMessagesPerTurn = 64;  // then completions and timeouts get their turn

// Timeline lanes of a server.
constexpr auto kRequestLane = obs::Lane::kLoop;
constexpr auto kApplyLane = obs::Lane::kComm;
constexpr auto kPullLane = obs::Lane::kBackward;

// On an apply job's thread: the apply's span from construction to
// destruction, and each consumed push's time in the queue before it.
class TimelineApply {
 public:
  TimelineApply(obs::Timeline* timeline, uint64_t key, uint64_t update)
      : timeline_(timeline), key_(key), update_(update), start_us_(timeline ? obs::Timeline::nowUs() : 0) {}
  ~TimelineApply() {
    if (timeline_ == nullptr) return;
    timeline_->span(fmt::format("apply chunk {}", key_), kApplyLane, start_us_, obs::Timeline::nowUs(),
                    {{"update", update_}});
  }
  TimelineApply(const TimelineApply&) = delete;
  TimelineApply& operator=(const TimelineApply&) = delete;

  void queued(int worker, int64_t received_us) {
    if (timeline_ == nullptr || received_us == 0) return;
    timeline_->span(fmt::format("queued: chunk {} from worker {}", key_, worker), kRequestLane, received_us,
                    start_us_, {{"update", update_}});
  }

 private:
  obs::Timeline* timeline_;
  uint64_t key_;
  uint64_t update_;
  int64_t start_us_;
};

}  // namespace

struct ParameterServer::Impl {
  ServerOptions options;
  std::string name;
  // Declared before the sockets so that it is destroyed after them: its
  // chunk memory is what zero-copy replies still being sent point into.
  std::unique_ptr<RequestHandler> handler;
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
  int port = 0;
  int wake_fd = -1;
  struct Completion {
    std::shared_ptr<ApplyJob> job;
    double seconds = 0;
  };
  std::mutex completions_mutex;
  std::vector<Completion> completions;
  std::vector<uint64_t> forwards_done;  // ids whose ticket has its outcome (completions_mutex)
  std::unique_ptr<ApplyPool> pool;
  // Async replicas: a connection to each server this one forwards to (by
  // destination, made at the first forward, made anew for a replacement at
  // a lost one's address), and the forwards in flight by id.
  std::optional<net::JobSecurity> security;
  struct Forwarder {
    std::unique_ptr<PsClient> client;
    uint64_t generation = 0;  // the destination's when connected
  };
  std::unordered_map<int, Forwarder> forwarders;
  struct InFlight {
    Ticket ticket;
    int to = 0;
    uint64_t generation = 0;
  };
  std::unordered_map<uint64_t, InFlight> forward_tickets;

  int openConnections() { return connections->open() + (local_connections ? local_connections->open() : 0); }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof(one));
  }

  // One received message: validated into a request, handled, answered.
  void receive(std::vector<zmq::message_t>& parts, size_t total, bool same_host);
  // Sends the replies in order, then starts the applies.
  void carryOut(Outbox out);
  void submit(ApplyJob job);
  void sendForwards(std::vector<Forward> forwards);
  // Hands finished applies and forwards back to the handler (I/O thread).
  void drainCompletions();
};

void ParameterServer::Impl::receive(std::vector<zmq::message_t>& parts, size_t total, bool same_host) {
  if (parts.empty()) return;
  const std::string routing(static_cast<const char*>(parts[0].data()), parts[0].size());
  uint64_t request_id = 0;
  Request request;
  try {
    if (parts.size() >= 2) request_id = net::salvageRequestId(parts[1].data(), parts[1].size());
    net::Frame f = net::decodeFrame(std::span(parts).subspan(1), total - 1, options.max_payload_bytes,
                                    handler->peerName(routing), kMessages);
    request = {routing, f.header, net::adoptPayload(std::move(f.payload)), same_host};
  } catch (const InputError& e) {
    carryOut(handler->refuseFrame(routing, request_id, e.what()));
    return;
  } catch (const std::bad_alloc&) {
    carryOut(handler->refuseFrame(routing, request_id, fmt::format("{} ran out of memory serving this request", name)));
    return;
  }
  Outbox out = handler->handle(request, Clock::now());
  while (out.retry_when_idle) {
    // The chief started over: its previous start's applies finish first.
    while (handler->applying()) {
      pool->rethrowFailure();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      drainCompletions();
    }
    out = handler->handle(request, Clock::now());
  }
  carryOut(std::move(out));
}

void ParameterServer::Impl::carryOut(Outbox out) {
  for (auto& r : out.replies) {
    if (options.timeline != nullptr && r.received_us != 0) {
      options.timeline->span(fmt::format("pull chunk {} for worker {}", r.header.key_begin, r.worker), kPullLane,
                             r.received_us, obs::Timeline::nowUs(), {{"version", r.header.clock}});
    }
    zmq::message_t id(r.routing.data(), r.routing.size());
    const auto local = reply_socket.find(r.routing);
    net::sendFrame(local == reply_socket.end() ? router : *local->second, r.header,
                   net::sharedPayload(std::move(r.payload)), &id);
  }
  for (auto& job : out.applies) submit(std::move(job));
  if (!out.forwards.empty()) sendForwards(std::move(out.forwards));
}

void ParameterServer::Impl::sendForwards(std::vector<Forward> forwards) {
  for (auto& f : forwards) {
    const RequestHandler::Destination* to = handler->destination(f.to);
    if (to == nullptr) {  // lost meanwhile: this push has its one copy here
      carryOut(handler->forwarded(f.id, f.to, "", true));
      continue;
    }
    Forwarder& forwarder = forwarders[f.to];
    if (!forwarder.client || forwarder.generation != to->generation) {
      // A new server at that address: the old connection's tickets fail as stale.
      // Made at the first forward: the other holder was up (the chief set it
      // up, or brought it up), so a refused connection is its death, not a
      // start to wait for; else that push would wait for its answer for good.
      forwarder.client = std::make_unique<PsClient>(std::vector<ServerAddress>{{to->endpoint, to->name}}, *security,
                                                    options.max_payload_bytes, Liveness{.seen_up = true});
      forwarder.generation = to->generation;
    }
    const uint64_t id = f.id;
    Ticket ticket = forwarder.client->send(0, f.header, net::copyPayload(f.payload), [this, id] {
      {
        std::lock_guard lock(completions_mutex);
        forwards_done.push_back(id);
      }
      wake();
    });
    forward_tickets[id] = {std::move(ticket), f.to, to->generation};
  }
}

void ParameterServer::Impl::submit(ApplyJob job) {
  std::string what = handler->describe(job);
  const bool awaited = job.awaited;
  pool->submit(std::move(what), [this, job = std::make_shared<ApplyJob>(std::move(job))] {
    Stopwatch watch;
    {
      // The span closes before the completion wakes the pulls the apply releases.
      TimelineApply span(options.timeline, job->key, job->update);
      for (const auto& [worker, received_us] : job->arrivals) span.queued(worker, received_us);
      if (options.apply_fault) options.apply_fault(job->key, job->update);
      handler->apply(*job);
    }
    const double seconds = watch.elapsed();
    {
      std::lock_guard lock(completions_mutex);
      completions.push_back({job, seconds});
    }
    wake();
  }, awaited);
}

void ParameterServer::Impl::drainCompletions() {
  std::vector<Completion> done;
  std::vector<uint64_t> forwarded;
  {
    std::lock_guard lock(completions_mutex);
    done.swap(completions);
    forwarded.swap(forwards_done);
  }
  for (const auto& d : done) carryOut(handler->applied(*d.job, d.seconds));
  for (uint64_t id : forwarded) {
    auto node = forward_tickets.extract(id);
    if (node.empty()) continue;
    InFlight& f = node.mapped();
    std::string failure;
    bool lost = false;
    try {
      f.ticket.wait(Deadline::afterSeconds(1), "a forwarded push");
    } catch (const PeerError& e) {
      const RequestHandler::Destination* to = handler->destination(f.to);
      // A connection replaced since (a replacement at that address) is not its loss.
      if (to == nullptr || to->generation != f.generation) continue;
      const auto it = forwarders.find(f.to);
      lost = it != forwarders.end() && it->second.client->lost(0);
      failure = e.what();
    } catch (const Error& e) {
      failure = e.what();
    }
    carryOut(handler->forwarded(id, f.to, failure, lost));
  }
}

ParameterServer::ParameterServer(ServerOptions options, const net::JobSecurity& security)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  s.security = security;
  s.name = fmt::format("ps {}", s.options.index);
  auto configure = [&s](zmq::socket_t& socket) {
    net::configureSocket(socket, s.options.max_payload_bytes, net::isIpv6(s.options.bind_host));
    socket.set(zmq::sockopt::sndhwm, 0);  // a ROUTER drops at the high-water mark: never do that to a reply
    // Inbound, the mark is per peer and only pauses reading from that peer
    // (TCP pushes back); nothing is dropped. It bounds what one member with
    // a runaway sender can queue here. Outsiders never get past CURVE.
    socket.set(zmq::sockopt::rcvhwm, kReceiveHighWaterMark);
  };
  auto listen = [&s](zmq::socket_t& socket, const std::string& endpoint) {
    try {
      socket.bind(endpoint);
    } catch (const zmq::error_t& e) {
      throw Error(fmt::format("{}: cannot listen on {}: {}", s.name, endpoint, e.what()));
    }
  };
  configure(s.router);
  s.connections = std::make_unique<net::ConnectionWatch>(s.context, s.router);
  s.zap = net::secureServer(s.context, s.router, s.name, security);
  listen(s.router, net::tcpEndpoint(s.options.bind_host, s.options.port == 0 ? -1 : s.options.port));
  const std::string bound = s.router.get(zmq::sockopt::last_endpoint);
  s.port = std::stoi(bound.substr(bound.rfind(':') + 1));
  if (net::isLoopbackHost(s.options.bind_host)) {
    s.local_router.emplace(s.context, zmq::socket_type::router);
    configure(*s.local_router);
    s.local_connections = std::make_unique<net::ConnectionWatch>(s.context, *s.local_router);
    s.local_endpoint = net::sameHostEndpoint(s.port, security);
    listen(*s.local_router, s.local_endpoint);
  }
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.wake_fd < 0) throw Error(fmt::format("{}: eventfd failed", s.name));
  // A failed job has no completion to deliver: wake the loop to rethrow it.
  s.pool = std::make_unique<ApplyPool>(s.options.apply_threads, [&s] { s.wake(); });
  s.handler = std::make_unique<RequestHandler>(RequestHandler::Options{.index = s.options.index,
                                                                       .max_payload_bytes = s.options.max_payload_bytes,
                                                                       .apply_threads = s.pool->threads(),
                                                                       .timeline = s.options.timeline});
}

ParameterServer::~ParameterServer() {
  impl_->pool.reset();  // jobs touch chunk memory: finish them first
  impl_->forwarders.clear();  // their callbacks wake this loop
  ::close(impl_->wake_fd);
  // libzmq leaves a Unix socket's file behind.
  if (!impl_->local_endpoint.empty()) ::unlink(impl_->local_endpoint.substr(std::string_view("ipc://").size()).c_str());
}

int ParameterServer::port() const { return impl_->port; }
std::string ParameterServer::name() const { return impl_->name; }

nlohmann::json ParameterServer::serve(const std::atomic<bool>* abort) {
  Impl& s = *impl_;
  Stopwatch wall;
  const auto startup_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(s.options.startup_timeout_s));
  std::vector<zmq_pollitem_t> items = {{s.router.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, s.wake_fd, ZMQ_POLLIN, 0}};
  if (s.local_router) items.push_back({s.local_router->handle(), 0, ZMQ_POLLIN, 0});
  std::vector<zmq::message_t> parts;
  Clock::time_point last_check = Clock::now();
  while (true) {
    if (abort != nullptr && abort->load()) break;
    if (!net::pollItems(items, std::chrono::milliseconds(100))) continue;
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] auto n = ::read(s.wake_fd, &count, sizeof(count));
      // A failed apply left its chunk half-updated: stop serving it, loudly.
      s.pool->rethrowFailure();
      s.drainCompletions();
    }
    for (const size_t item : {size_t{0}, size_t{2}}) {
      if (item >= items.size() || !(items[item].revents & ZMQ_POLLIN)) continue;
      zmq::socket_t& socket = item == 0 ? s.router : *s.local_router;
      // Bounded, so that under a flood completions and timeouts still get
      // their turn; zmq_poll reports the rest at once on the next turn.
      for (int i = 0; i < kMaxMessagesPerTurn; ++i) {
        const size_t total = net::receiveParts(socket, parts, 3);
        if (total == 0) break;
        if (item == 2) s.reply_socket.try_emplace(parts[0].to_string(), &socket);
        s.receive(parts, total, item == 2);
      }
    }
    // Timeouts are checked a few times a second, not after every message.
    if (Clock::now() - last_check < std::chrono::milliseconds(50)) continue;
    last_check = Clock::now();
    s.openConnections();  // keeps the monitors' queues short
    // Before its chief initialised it, a server has no job to finish.
    if (!s.handler->initialised() && stopRequested()) {
      throw Interrupted(fmt::format("{}: stopped by a signal before the chief (worker 0) initialised it", s.name));
    }
    if (!s.handler->initialised() && Clock::now() > startup_deadline) {
      throw PeerError(fmt::format(
          "{}: the chief (worker 0) did not initialise this server within {}", s.name,
          formatDuration(std::chrono::milliseconds(static_cast<int64_t>(s.options.startup_timeout_s * 1000)))));
    }
    RequestHandler::Tick tick = s.handler->tick(Clock::now());
    s.carryOut(std::move(tick.out));
    if (tick.everyone_gone) break;
  }
  s.handler->stopApplying();
  // A goodbye reply still queued at close can be lost, failing its worker:
  // close once every connection is gone, or after 2 s (a lost worker may
  // never hang up). Allowing one open connection per lost worker let a
  // worker that said goodbye keep a killed one's place, and lose its reply.
  if (abort == nullptr || !abort->load()) {
    net::ConnectionWatch::waitUntilAtMost({s.connections.get(), s.local_connections.get()}, 0,
                                          std::chrono::seconds(2));
  }
  s.router.set(zmq::sockopt::linger, 2000);
  if (s.local_router) s.local_router->set(zmq::sockopt::linger, 2000);
  s.pool->finish();  // let running applies finish before the summary
  s.pool->rethrowFailure();
  s.drainCompletions();
  return s.handler->summary(wall.elapsed());
}

}  // namespace tandem::ps
