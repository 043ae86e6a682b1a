#include "ps/messages.hpp"
#include "ps/server.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "core/stop_request.hpp"
#include "core/logging.hpp"
#include "ps/server_impl.hpp"

namespace tandem::ps {
namespace {

constexpr int kMaxMessagesPerTurn = 64;  // then completions and timeouts get their turn

}  // namespace

using MessageType = net::MessageType;

int ParameterServer::Impl::workerOf(const std::string& routing, MessageType type) {
  const int w = workers.touch(routing, true);
  if (w < 0) throw Refusal{fmt::format("{} before ps-hello: say which worker you are first", kMessages.nameOf(type))};
  return w;
}

void ParameterServer::Impl::onInit(const std::string& routing, net::Frame& f) {
  ServerConfig c;
  try {
    c = decodeServerInit(f.text(), options.max_payload_bytes, "chief");
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  // Checked before anything changes: a refused init leaves the server as it was.
  ChunkStore::validate(c);
  if (admission.mayInit(c, name)) {
    startOver();
    TANDEM_LOG_WARN("{}: the chief started again after a failure ({:016x} replaces {:016x}); starting over from its "
                    "step {}",
                    name, c.generation, c.replaces, c.start_step);
  }
  store.reset(c);
  heard_every_step.assign(static_cast<size_t>(c.workers), options.index == 0 ? 1 : 0);
  for (const auto& chunk : store.chunks()) {
    for (int w : chunk.pushers) heard_every_step[static_cast<size_t>(w)] = 1;
  }
  liveness.emplace(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c.peer_timeout_s)));
  workers.reset(c.workers);
  clocks.emplace(c.mode, c.staleness, c.workers, c.start_step, c.total_steps);
  const int64_t floats = totalFloats(store.chunks());
  TANDEM_LOG_INFO("{}: {} mode, {} worker(s), {} chunk(s), {:.1f} MB, optimizer {}, {} apply thread(s), {} on the wire{}",
                  name, modeName(c.mode), c.workers, store.chunks().size(), static_cast<double>(floats) * 4 / 1e6,
                  c.optimizer.name, apply_threads, wireDtypeName(c.wire),
                  c.push_bits ? fmt::format(" (pushes {})", c.pushFormat().name()) : "");
  admission.initialised(c);
  config = std::move(c);
  replyOk(routing, f.header.request_id);
  checkReady();
}

void ParameterServer::Impl::onSet(const std::string& routing, net::Frame& f) {
  const size_t index = store.indexOf(f.header);
  if (admission.isReady()) throw Refusal{fmt::format("ps-set of chunk {} after training started", store.at(index).key)};
  store.set(index, f.header.clock, f.bytes());
  replyOk(routing, f.header.request_id);
  checkReady();
}

void ParameterServer::Impl::checkReady() {
  if (admission.isReady() || !store.everyChunkSet()) return;
  for (auto& held : admission.ready()) {
    try {
      registerWorker(held.routing, held.request_id, held.hello);
    } catch (const Refusal& r) {
      ++stats.bad_frames;
      TANDEM_LOG_WARN("{}: refused a hello: {}", name, r.reason);
      replyError(held.routing, held.request_id, r.reason);
    }
  }
}

void ParameterServer::Impl::onHello(const std::string& routing, net::Frame& f) {
  Hello h;
  try {
    h = decodeHello(f.bytes(), "a client");
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  // Workers may arrive before the chief has initialised this server, or
  // before the init of the start they joined (the chief's next start after
  // a failure): they are answered once it has arrived.
  if (admission.admitNow({routing, f.header.request_id, h})) registerWorker(routing, f.header.request_id, h);
}

void ParameterServer::Impl::registerWorker(const std::string& routing, uint64_t request_id, const Hello& h) {
  admission.check(h);
  bool replaced = false;
  if (std::string why = workers.bind(routing, h.worker, admission.elastic(), &replaced); !why.empty()) {
    throw admission.bindRefusal(std::move(why));
  }
  HelloAnswer answer;
  if (options.index == 0) {
    if (replaced) clocks->rejoin(static_cast<int>(h.worker));
    answer = {clocks->clockOf(static_cast<int>(h.worker)), config->start_step};
  }
  answer.arena_mapped = mapArena(routing, static_cast<int>(h.worker), h);
  if (replaced) {
    ++stats.rejoins;
    TANDEM_LOG_WARN("{}: worker {} rejoined from a new connection (a replacement){}; its old connection is dropped",
                    name, h.worker, options.index == 0 ? fmt::format(" at its step {}", answer.clock) : std::string());
  }
  reply(routing, {.type = MessageType::kOk, .request_id = request_id}, net::copyPayload(encode(answer)));
  if (replaced && options.index == 0) answerClocks();
}

bool ParameterServer::Impl::mapArena(const std::string& routing, int worker, const Hello& h) {
  arenas.erase(worker);  // a replacement's hello replaces its predecessor's
  // Only over the same-host socket: a remote member's handle would name a
  // process here that is not its own.
  if (!h.arena || !reply_socket.contains(routing)) return false;
  try {
    arenas[worker] = net::SharedArena::open(*h.arena, fmt::format("worker {}", worker));
    return true;
  } catch (const InputError& e) {
    TANDEM_LOG_WARN("{}: worker {} sends its bytes through the socket: {}", name, worker, e.what());
    return false;
  }
}

ArenaDestination ParameterServer::Impl::namedArenaBytes(int w, const net::Frame& f, size_t most) {
  const auto it = arenas.find(w);
  if (it == arenas.end()) {
    throw Refusal{fmt::format("worker {} sent a {} naming shared memory, but none of its is mapped here", w,
                              kMessages.nameOf(f.header.type))};
  }
  const std::string peer = fmt::format("worker {}", w);
  try {
    const net::ArenaRef ref = net::decodeArenaRef(f.bytes(), peer);
    return {it->second, it->second->slice(ref, most, peer), ref};
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
}

void ParameterServer::Impl::onPush(const std::string& routing, net::Frame& f) {
  const int w = workerOf(routing, f.header.type);
  const size_t index = store.indexOf(f.header);
  const bool shared = (f.header.flags & net::kFlagInArena) != 0;
  OwnedBytes grad;
  if (shared) {
    // The bytes stay in the worker's memory until the apply reads them: it
    // rewrites them only after this chunk's next pull is answered, which
    // waits for this push to be applied. The arena's owner keeps them mapped.
    const ArenaDestination named = namedArenaBytes(w, f, options.max_payload_bytes);
    grad = {named.arena, named.bytes};
  } else {
    grad = net::adoptPayload(std::move(f.payload));
  }
  store.requirePayload(index, f.header.type, grad.view(), config->pushFormat());
  if (!admission.isReady()) throw Refusal{"ps-push before every chunk was initialised"};
  const size_t bytes = grad.size();
  std::optional<ApplyJob> job = store.push(w, index, f.header.clock, std::move(grad), timelineNow());
  ++stats.pushes;
  stats.bytes_in += bytes;
  if (shared) stats.shared_bytes_in += bytes;
  replyOk(routing, f.header.request_id);
  submit(std::move(job));
}

void ParameterServer::Impl::onPull(const std::string& routing, net::Frame& f) {
  const int w = workerOf(routing, f.header.type);
  const size_t index = store.indexOf(f.header);
  const ChunkState& c = store.at(index);
  const std::string what = kMessages.nameOf(f.header.type);
  std::vector<uint32_t> snapshot;
  std::optional<ArenaDestination> into;
  if ((f.header.flags & net::kFlagInArena) != 0) {  // a ps-pull: handle() refuses the flag on ps-state
    into = namedArenaBytes(w, f, SIZE_MAX);
    const size_t bytes = wirePayloadBytes(c, config ? config->wire : WireDtype::kFloat32);
    if (into->ref.bytes != bytes) {
      throw Refusal{fmt::format("worker {} offered {} bytes of shared memory for chunk {}'s {} bytes", w,
                                into->ref.bytes, c.key, bytes)};
    }
  } else if (f.header.type == msg::kState && f.payload.size() != 0 && config && config->mode != TrainingMode::kPsSync) {
    try {
      snapshot = decodeSnapshotPoint(f.bytes(), workers.size(), fmt::format("worker {}", w)).clocks;
    } catch (const InputError& e) {
      throw Refusal{e.what()};
    }
  } else if (f.payload.size() != 0) {
    throw Refusal{what + " carries no payload"};
  }
  if (!admission.isReady()) throw Refusal{what + " before every chunk was initialised"};
  ++stats.pulls;
  send(store.pull(index,
                  {routing, f.header.request_id, 0, f.header.type == msg::kState, Clock::now(), w, timelineNow(),
                   std::move(snapshot), std::move(into)},
                  f.header.clock));
}

void ParameterServer::Impl::onClock(const std::string& routing, net::Frame& f) {
  const int w = workerOf(routing, f.header.type);
  if (options.index != 0) throw Refusal{fmt::format("ps-clock goes to ps 0, not {}", name)};
  try {
    const StepReport report = decodeStepReport(f.bytes(), fmt::format("worker {}", w));
    clocks->report(w, f.header.clock, report, routing, f.header.request_id);
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  answerClocks();
}

void ParameterServer::Impl::onAwait(const std::string& routing, net::Frame& f) {
  const int w = workerOf(routing, f.header.type);
  if (options.index != 0) throw Refusal{fmt::format("ps-await-workers goes to ps 0, not {}", name)};
  clocks->awaitOthers(w, routing, f.header.request_id);
  answerClocks();
}

void ParameterServer::Impl::onHold(const std::string& routing, net::Frame& f) {
  const int w = workerOf(routing, f.header.type);
  if (options.index != 0) throw Refusal{fmt::format("{} goes to ps 0, not {}", kMessages.nameOf(f.header.type), name)};
  try {
    if (f.header.type == msg::kHold) {
      clocks->hold(w, routing, f.header.request_id);
    } else {
      clocks->unhold(w);
      replyOk(routing, f.header.request_id);
    }
  } catch (const InputError& e) {
    throw Refusal{e.what()};
  }
  answerClocks();
}

void ParameterServer::Impl::onDone(const std::string& routing, net::Frame& f) {
  const int w = workerOf(routing, f.header.type);
  clocks->finish(w);
  replyOk(routing, f.header.request_id);
  answerClocks();  // a finished worker no longer holds anyone back
}

void ParameterServer::Impl::onLeave(const std::string& routing, net::Frame& f) {
  const int w = workerOf(routing, f.header.type);
  replyOk(routing, f.header.request_id);
  if (!store.depart(w)) return;
  TANDEM_LOG_WARN("{}: worker {} left to start again in place; this start's waits for it fail now", name, w);
  expireClockWaits();
  send(store.expire(Clock::now()));
}

void ParameterServer::Impl::onLr(const std::string& routing, net::Frame& f) {
  const int w = workerOf(routing, f.header.type);
  double lr = 0;
  if (f.payload.size() != sizeof(lr)) {
    throw Refusal{fmt::format("ps-lr carries {} bytes; it holds one 8-byte float", f.payload.size())};
  }
  std::memcpy(&lr, f.payload.data(), sizeof(lr));
  if (!std::isfinite(lr) || lr < 0) throw Refusal{fmt::format("worker {} sent learning rate {}", w, lr)};
  store.setLr(w, lr);
  replyOk(routing, f.header.request_id);
}

void ParameterServer::Impl::handle(std::vector<zmq::message_t>& parts, size_t total) {
  if (parts.empty()) return;
  const std::string routing(static_cast<const char*>(parts[0].data()), parts[0].size());
  const std::string peer = workers.nameOf(routing);
  uint64_t request_id = 0;
  try {
    if (parts.size() >= 2) request_id = net::salvageRequestId(parts[1].data(), parts[1].size());
    net::Frame f = net::decodeFrame(std::span(parts).subspan(1), total - 1, options.max_payload_bytes, peer, kMessages);
    request_id = f.header.request_id;
    if ((f.header.flags & net::kFlagInArena) != 0 && f.header.type != msg::kPush &&
        f.header.type != msg::kPull) {
      throw Refusal{fmt::format("{} cannot name shared memory", kMessages.nameOf(f.header.type))};
    }
    switch (net::code(f.header.type)) {
      case net::code(msg::kHello): onHello(routing, f); break;
      case net::code(msg::kInit): onInit(routing, f); break;
      case net::code(msg::kSet): onSet(routing, f); break;
      case net::code(msg::kPush): onPush(routing, f); break;
      case net::code(msg::kPull):
      case net::code(msg::kState): onPull(routing, f); break;
      case net::code(msg::kClock): onClock(routing, f); break;
      case net::code(msg::kDone): onDone(routing, f); break;
      case net::code(msg::kLeave): onLeave(routing, f); break;
      case net::code(msg::kAwaitWorkers): onAwait(routing, f); break;
      case net::code(msg::kLr): onLr(routing, f); break;
      case net::code(msg::kAlive):
        workerOf(routing, f.header.type);  // heard from it: that is all
        replyOk(routing, f.header.request_id);
        break;
      case net::code(msg::kHold):
      case net::code(msg::kRelease): onHold(routing, f); break;
      default:
        throw Refusal{fmt::format("{} is not a parameter-server request", kMessages.nameOf(f.header.type))};
    }
  } catch (const InputError& e) {
    ++stats.bad_frames;
    if (uint64_t more = 0; reject_log.allow(peer, more)) {
      TANDEM_LOG_WARN("{}: rejected a frame from {}: {}{}", name, peer, e.what(), reject_log.suppressedText(more));
    }
    replyError(routing, request_id, e.what());
  } catch (const Refusal& r) {
    ++stats.bad_frames;
    if (uint64_t more = 0; reject_log.allow(peer, more)) {
      TANDEM_LOG_WARN("{}: refused a request from {}: {}{}", name, peer, r.reason, reject_log.suppressedText(more));
    }
    replyError(routing, request_id, r.reason);
  } catch (const std::bad_alloc&) {
    ++stats.bad_frames;
    replyError(routing, request_id, fmt::format("{} ran out of memory serving this request", name));
  }
}

ParameterServer::ParameterServer(ServerOptions options, const net::JobSecurity& security)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  s.name = fmt::format("ps {}", s.options.index);
  s.store = ChunkStore(s.name);
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
  s.apply_threads = s.pool->threads();
}

ParameterServer::~ParameterServer() {
  impl_->pool.reset();  // jobs touch chunk memory: finish them first
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
  Clock::time_point last_report = Clock::now();
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
        s.handle(parts, total);
      }
    }
    // Timeouts are checked a few times a second, not after every message.
    if (Clock::now() - last_check < std::chrono::milliseconds(50)) continue;
    last_check = Clock::now();
    s.reportProgress(last_report, std::chrono::seconds(30));
    s.openConnections();  // keeps the monitors' queues short
    // Before its chief initialised it, a server has no job to finish.
    if (!s.config && stopRequested()) {
      throw Interrupted(fmt::format("{}: stopped by a signal before the chief (worker 0) initialised it", s.name));
    }
    if (!s.config && Clock::now() > startup_deadline) {
      throw PeerError(fmt::format(
          "{}: the chief (worker 0) did not initialise this server within {}", s.name,
          formatDuration(std::chrono::milliseconds(static_cast<int64_t>(s.options.startup_timeout_s * 1000)))));
    }
    s.expireClockWaits();
    s.send(s.store.expire(Clock::now()));
    if (s.everyoneGone()) break;
  }
  s.store.stopApplying(true);
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
  return s.summary(wall.elapsed());
}

}  // namespace tandem::ps
