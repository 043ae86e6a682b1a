#include "ps/messages.hpp"
#include "ps/worker.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/patient_wait.hpp"
#include "obs/timeline.hpp"

namespace tandem::ps {

using net::MessageType;

size_t defaultPushWindow(const KeyLayout& layout, WireDtype wire, size_t pushers) {
  int64_t largest = 0;
  for (const auto& chunk : layout.chunks) largest = std::max(largest, chunk.length);
  const size_t chunk = static_cast<size_t>(largest) * wireBytes(wire);
  return std::max(chunk, 2 * chunk / std::max<size_t>(1, pushers));
}

size_t hostPushersPerServer(const KeyLayout& layout, const std::vector<int>& host, int worker, bool hierarchical) {
  const auto me = std::find(host.begin(), host.end(), worker);
  TANDEM_ENFORCE(me != host.end(), "worker {} is not on its own host", worker);
  const size_t host_size = host.size();
  const auto rank = static_cast<size_t>(me - host.begin());
  if (!hierarchical) return host_size;
  // by server: which ranks push one of its chunks
  std::vector<std::vector<bool>> owners(layout.server_floats.size(), std::vector<bool>(host_size, false));
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    owners[static_cast<size_t>(layout.chunks[c].server)][pusherRank(c, host_size)] = true;
  }
  size_t most = 1;
  for (const auto& ranks : owners) {
    if (ranks[rank]) most = std::max<size_t>(most, std::count(ranks.begin(), ranks.end(), true));
  }
  return most;
}

Worker::Worker(WorkerOptions options, net::JobSecurity security)
    : options_(std::move(options)),
      client_(std::make_unique<PsClient>(options_.servers, std::move(security), net::kMaxPayloadBytes,
                                         options_.liveness)) {
  const size_t chunks = options_.layout.chunks.size();
  const PushFormat pushes = options_.pushFormat();
  if (!pushes.raw()) encoder_.emplace(pushes, options_.error_feedback || pushes.quantised(), chunks);
  push_tickets_.resize(chunks);
  pull_tickets_.resize(chunks);
  pull_expected_.assign(chunks, false);
  pending_.resize(chunks);
  waiting_.resize(options_.servers.size());
  in_flight_bytes_.assign(options_.servers.size(), 0);
  const bool same_host = std::any_of(options_.servers.begin(), options_.servers.end(),
                                     [](const ServerAddress& a) { return net::isSameHostEndpoint(a.endpoint); });
  if (options_.shared_memory && same_host) {
    const auto floats = static_cast<size_t>(options_.layout.total_floats);
    try {
      arena_ = net::SharedArena::create(floats * sizeof(float) + floats * wireBytes(options_.wire));
    } catch (const Error& e) {
      TANDEM_LOG_WARN("worker {}: pushes and pulls go through sockets: {}", options_.index, e.what());
    }
  }
}

int Worker::serversSharingMemory() const {
  return static_cast<int>(std::count(arena_mapped_.begin(), arena_mapped_.end(), true));
}

// The landing area starts after the float32 gradients.
uint64_t Worker::landingOffset() const { return static_cast<uint64_t>(options_.layout.total_floats) * sizeof(float); }

std::byte* Worker::pullLanding() const { return arena_ ? arena_->data() + landingOffset() : nullptr; }

net::ArenaRef Worker::pullRef(size_t c) const {
  return {landingOffset() + static_cast<uint64_t>(options_.layout.chunks[c].begin) * wireBytes(options_.wire),
          chunkWireBytes(c)};
}

zmq::message_t Worker::pushPayload(size_t c, const void* data, net::FrameHeader& header) const {
  const size_t bytes = chunkPushBytes(c);
  if (sharesWith(c) && arena_->contains(data, bytes)) {
    header.flags |= net::kFlagInArena;
    return net::copyPayload(net::encode(net::ArenaRef{arena_->offsetOf(data), bytes}));
  }
  return net::sharedPayload(std::shared_ptr<const void>(data, [](const void*) {}), data, bytes);
}

zmq::message_t Worker::pullPayload(size_t c, net::FrameHeader& header) const {
  if (!sharesWith(c)) return zmq::message_t();
  header.flags |= net::kFlagInArena;
  return net::copyPayload(net::encode(pullRef(c)));
}

// The client's I/O thread may be inside pushTaken until it stops: stop it
// while the window's members still exist.
Worker::~Worker() {
  {
    std::lock_guard lock(window_mutex_);
    closing_ = true;
  }
  client_.reset();
}

net::FrameHeader Worker::chunkHeader(MessageType type, size_t c, int64_t clock) const {
  const auto& chunk = options_.layout.chunks[c];
  return {.type = type, .clock = static_cast<uint32_t>(clock), .key_begin = chunk.key, .key_end = chunk.key + 1};
}

void Worker::initServers(const std::vector<ServerConfig>& configs, const ChunkValues& values, Deadline deadline) {
  std::vector<Ticket> tickets;
  for (int i = 0; i < servers(); ++i) {
    const std::string json = toJson(configs.at(static_cast<size_t>(i))).dump();
    tickets.push_back(client_->send(i, {.type = msg::kInit}, net::copyPayload(json)));
  }
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) {
    int64_t applied = 0;
    const std::vector<float> floats = values(c, applied);
    tickets.push_back(client_->send(serverOf(c), chunkHeader(msg::kSet, c, applied),
                                    net::copyPayload(floats.data(), floats.size() * sizeof(float))));
  }
  for (auto& t : tickets) t.wait(deadline, "the initial parameters");
}

HelloAnswer Worker::hello(Deadline deadline) {
  std::vector<Ticket> tickets;
  for (int i = 0; i < servers(); ++i) {
    Hello hello{options_.index, options_.layout.fingerprint(), options_.generation};
    if (arena_ && net::isSameHostEndpoint(options_.servers[static_cast<size_t>(i)].endpoint)) {
      hello.arena = arena_->handle();
    }
    tickets.push_back(client_->send(i, {.type = msg::kHello}, net::copyPayload(encode(hello))));
  }
  HelloAnswer first;
  std::vector<bool> mapped(tickets.size(), false);
  for (size_t i = 0; i < tickets.size(); ++i) {
    const net::Frame reply = tickets[i].wait(deadline, "hello (is the chief up and the server initialised?)");
    const HelloAnswer answer = decodeHelloAnswer(reply.bytes(), options_.servers[i].name);
    mapped[i] = arena_ != nullptr && answer.arena_mapped;
    if (i == 0) first = answer;
  }
  std::lock_guard lock(window_mutex_);
  arena_mapped_ = std::move(mapped);
  return first;
}

void Worker::push(size_t c, const float* grad, int64_t step) {
  // Encoding needs no lock: each chunk has its own buffer, which the
  // float32 rule keeps (its last push was awaited before this one).
  const void* data = grad;
  if (encoder_) data = encoder_->encode(c, grad, static_cast<size_t>(options_.layout.chunks[c].length));
  std::lock_guard lock(window_mutex_);
  pending_[c].data = data;
  pending_[c].step = step;
  // The pull goes out with the push: the server answers it when the update
  // is applied, so apply and transfer overlap the rest of backward. SSP
  // pulls after reportStep().
  if (options_.mode != Mode::Ssp) pending_[c].pull_needed = options_.mode == Mode::PsSync ? step + 1 : 0;
  if (pending_[c].pull_needed) pull_expected_[c] = true;
  const auto server = static_cast<size_t>(serverOf(c));
  const size_t window = options_.push_window_bytes;
  if (window == 0 || in_flight_bytes_[server] == 0 || in_flight_bytes_[server] + chunkPushBytes(c) <= window) {
    sendPush(c);
  } else {
    waiting_[server].insert(c);
  }
}

void Worker::sendPush(size_t c) {
  Pending& p = pending_[c];
  const int server = serverOf(c);
  const size_t bytes = chunkPushBytes(c);
  net::FrameHeader header = chunkHeader(msg::kPush, c, p.step);
  zmq::message_t payload = pushPayload(c, p.data, header);
  std::function<void()> taken;
  if (options_.push_window_bytes > 0) {
    in_flight_bytes_[static_cast<size_t>(server)] += bytes;
    taken = [this, server, bytes] { pushTaken(server, bytes); };
  }
  push_tickets_[c] = client_->send(server, header, std::move(payload), std::move(taken));
  if (p.pull_needed) {
    net::FrameHeader pull_header = chunkHeader(msg::kPull, c, *p.pull_needed);
    zmq::message_t request = pullPayload(c, pull_header);
    pull_tickets_[c] = client_->send(server, pull_header, std::move(request));
  }
  p = Pending();
  window_cv_.notify_all();
}

void Worker::pushTaken(int server, size_t bytes) {
  std::lock_guard lock(window_mutex_);
  if (closing_) return;
  const auto s = static_cast<size_t>(server);
  in_flight_bytes_[s] -= bytes;
  auto& queue = waiting_[s];
  while (!queue.empty()) {
    const size_t c = *queue.begin();
    if (in_flight_bytes_[s] > 0 && in_flight_bytes_[s] + chunkPushBytes(c) > options_.push_window_bytes) break;
    queue.erase(queue.begin());
    sendPush(c);
  }
}

void Worker::pull(size_t c, int64_t needed) {
  std::lock_guard lock(window_mutex_);
  pull_expected_[c] = true;
  // Behind its own push (still waiting for the window): it must see it.
  if (waiting_[static_cast<size_t>(serverOf(c))].count(c) > 0) {
    pending_[c].pull_needed = needed;
    return;
  }
  net::FrameHeader header = chunkHeader(msg::kPull, c, needed);
  zmq::message_t request = pullPayload(c, header);
  pull_tickets_[c] = client_->send(serverOf(c), header, std::move(request));
}

void Worker::pullAll(int64_t needed) {
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) pull(c, needed);
}

Ticket Worker::waitSent(size_t c, Deadline deadline, bool pull_ticket, const std::string& what) {
  std::unique_lock lock(window_mutex_);
  const auto server = static_cast<size_t>(serverOf(c));
  const auto started = Clock::now();
  if (!window_cv_.wait_until(lock, deadline.at(), [&] { return waiting_[server].count(c) == 0; })) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    throw PeerError(fmt::format("{} did not take the pushes ahead of {} (waited {}): is it overloaded or gone?",
                                options_.servers[server].name, what, formatDuration(waited)));
  }
  return pull_ticket ? pull_tickets_[c] : push_tickets_[c];
}

// --timeline: a push (queued until the server took it) or a pull (queued
// until its version arrived) on the communication lane.
void Worker::trace(const char* what, size_t c, size_t bytes, const Ticket& ticket, int64_t step) const {
  obs::Timeline* timeline = options_.timeline;
  if (timeline == nullptr) return;
  const Ticket::Times t = ticket.times();
  if (t.replied_us == 0) return;
  timeline->span(fmt::format("{} chunk {}", what, c), obs::Lane::kComm, t.queued_us, t.replied_us,
                 {{"server", serverOf(c)}, {"bytes", bytes}, {"step", step}});
}

void Worker::receivePulls(Deadline deadline, int64_t step, const PullSink& sink, size_t end) {
  end = std::min(end, options_.layout.chunks.size());
  for (size_t c = 0; c < end; ++c) {
    {
      std::lock_guard lock(window_mutex_);
      if (!pull_expected_[c]) continue;  // pulled by a host-mate (hierarchical), or already received
    }
    const std::string what = fmt::format("the pull of chunk {} for step {}", c, step);
    Ticket ticket = waitSent(c, deadline, /*pull_ticket=*/true, what);
    net::Frame frame = ticket.wait(deadline, what);
    trace("pull", c, chunkWireBytes(c), ticket, step);
    {
      std::lock_guard lock(window_mutex_);
      pull_tickets_[c] = Ticket();
      pull_expected_[c] = false;
    }
    const size_t expected = chunkWireBytes(c);
    if ((frame.header.flags & net::kFlagInArena) != 0) {
      // The server wrote the values where this pull asked; nothing else may
      // be named.
      const std::string& name = options_.servers[static_cast<size_t>(serverOf(c))].name;
      net::ArenaRef ref;
      try {
        ref = net::decodeArenaRef(frame.bytes(), name);
      } catch (const InputError& e) {
        throw PeerError(e.what());
      }
      if (!sharesWith(c) || ref != pullRef(c)) {
        throw PeerError(fmt::format("{} answered the pull of chunk {} with shared memory it was not offered", name, c));
      }
      std::byte* values = arena_->data() + ref.offset;
      frame.payload = zmq::message_t(values, expected, [](void*, void*) {}, nullptr);
    }
    if (frame.payload.size() != expected) {
      throw PeerError(fmt::format("ps {} sent {} bytes for chunk {} ({} expected)", serverOf(c), frame.payload.size(),
                                  c, expected));
    }
    sink(c, {frame.payload.data(), static_cast<size_t>(options_.layout.chunks[c].length), options_.wire});
  }
}

StepAgreement Worker::reportStep(int64_t finished, const StepReport& report, Deadline deadline) {
  Ticket clock = sendReport(finished, report);
  return awaitReport(clock, finished, deadline);
}

Ticket Worker::sendReport(int64_t finished, const StepReport& report) {
  return client_->send(0, {.type = msg::kClock, .clock = static_cast<uint32_t>(finished)},
                       net::copyPayload(encode(report)));
}

StepAgreement Worker::awaitReport(Ticket& clock, int64_t finished, Deadline deadline) {
  net::Frame reply = clock.wait(deadline, fmt::format("the end of step {}", finished - 1));
  // --timeline: until every worker reported (ps 0's barrier) and the answer crossed back.
  if (obs::Timeline* timeline = options_.timeline) {
    const Ticket::Times t = clock.times();
    if (t.replied_us != 0) {
      timeline->span("end-of-step agreement at ps 0", obs::Lane::kComm, t.queued_us, t.replied_us,
                     {{"step", finished - 1}});
    }
  }
  return decodeStepAgreement(reply.bytes(), "ps 0");
}

void Worker::awaitPushes(Deadline deadline, int64_t step) {
  for (size_t c = 0; c < push_tickets_.size(); ++c) {
    const std::string what = fmt::format("the push of chunk {} for step {}", c, step);
    Ticket ticket = waitSent(c, deadline, /*pull_ticket=*/false, what);
    if (!ticket.valid()) continue;
    ticket.wait(deadline, what);
    trace("push", c, chunkPushBytes(c), ticket, step);
    std::lock_guard lock(window_mutex_);
    push_tickets_[c] = Ticket();
  }
  for (auto& t : notice_tickets_) t.wait(deadline, "a learning rate or ps-alive");
  notice_tickets_.clear();
}

StepAgreement Worker::awaitWorkers(int64_t step, Deadline deadline) {
  Ticket ticket = client_->send(0, {.type = msg::kAwaitWorkers, .clock = static_cast<uint32_t>(step)},
                                zmq::message_t());
  net::Frame reply = ticket.wait(deadline, "the other workers' last steps");
  return decodeStepAgreement(reply.bytes(), "ps 0");
}

std::vector<FetchedState> Worker::fetchState(int64_t version, int slots, Deadline deadline,
                                           const SnapshotPoint* snapshot) {
  std::vector<Ticket> tickets;
  const std::vector<char> point = snapshot != nullptr ? encode(*snapshot) : std::vector<char>();
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) {
    tickets.push_back(client_->send(serverOf(c), chunkHeader(msg::kState, c, version),
                                    point.empty() ? zmq::message_t() : net::copyPayload(point)));
  }
  std::vector<FetchedState> states(tickets.size());
  for (size_t c = 0; c < tickets.size(); ++c) {
    net::Frame frame = tickets[c].wait(deadline, fmt::format("the optimizer state of chunk {}", c));
    const auto length = static_cast<size_t>(options_.layout.chunks[c].length);
    if (frame.payload.size() != length * sizeof(float) * static_cast<size_t>(1 + slots)) {
      throw PeerError(fmt::format("ps {} sent {} bytes of state for chunk {}", serverOf(c), frame.payload.size(), c));
    }
    FetchedState& state = states[c];
    state.clock = frame.header.clock;
    state.length_ = length;
    state.bytes_ = shared(net::adoptPayload(std::move(frame.payload)));
    state.floats_ = {reinterpret_cast<const float*>(state.bytes_.data()), length * static_cast<size_t>(1 + slots)};
  }
  return states;
}

SnapshotPoint Worker::holdForSnapshot(Deadline deadline) {
  Ticket ticket = client_->send(0, {.type = msg::kHold}, zmq::message_t());
  const net::Frame reply = ticket.wait(deadline, "the other workers to pause for a consistent checkpoint");
  // The servers check the clock count against the cluster's when it comes back.
  return decodeSnapshotPoint(reply.bytes(), 0, options_.servers[0].name);
}

void Worker::releaseSnapshot(Deadline deadline) {
  client_->send(0, {.type = msg::kRelease}, zmq::message_t()).wait(deadline, "the end of the hold");
}

void Worker::setLearningRate(double lr) {
  if (sent_lr_ == lr) return;
  const std::vector<char> payload = encode(LearningRate{lr});
  for (int i = 0; i < servers(); ++i) {
    // Sent before this step's pushes on the same connection: they see it.
    notice_tickets_.push_back(client_->send(i, {.type = msg::kLr}, net::copyPayload(payload.data(), payload.size())));
  }
  sent_lr_ = lr;
}

void Worker::sayAlive() {
  for (int i = 0; i < servers(); ++i) notice_tickets_.push_back(client_->send(i, {.type = msg::kAlive}, zmq::message_t()));
}

void Worker::sayDone(Deadline deadline) { sayToEveryServer(msg::kDone, deadline, "the goodbye", false); }

void Worker::sayLeaving(Deadline deadline) {
  sayToEveryServer(msg::kLeave, deadline, "the notice of leaving", true);
}

void Worker::sayToEveryServer(MessageType type, Deadline deadline, const char* what, bool skip_silent) {
  if (done_) return;
  done_ = true;
  std::vector<Ticket> tickets;
  for (int i = 0; i < servers(); ++i) tickets.push_back(client_->send(i, {.type = type}, zmq::message_t()));
  for (auto& t : tickets) {
    try {
      t.wait(deadline, what);
    } catch (const std::exception&) {
      if (!skip_silent) throw;
    }
  }
  {
    std::lock_guard lock(window_mutex_);
    closing_ = true;
  }
  client_.reset();  // hang up at once: a server closes once its workers have
}

}  // namespace tandem::ps
