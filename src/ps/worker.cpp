#include "ps/messages.hpp"
#include "ps/worker.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

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
      security_(security),
      client_(std::make_unique<PsClient>(options_.servers, std::move(security), net::kMaxPayloadBytes,
                                         options_.liveness)) {
  const size_t chunks = options_.layout.chunks.size();
  const PushFormat pushes = options_.pushFormat();
  if (!pushes.raw()) encoder_.emplace(pushes, options_.error_feedback || pushes.quantised(), chunks);
  push_tickets_.resize(chunks);
  pushed_.assign(chunks, {nullptr, 0});
  pull_tickets_.resize(chunks);
  pull_sent_.resize(chunks);
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

zmq::message_t Worker::pushPayload(size_t c, int server, const void* data, net::FrameHeader& header) const {
  const size_t bytes = chunkPushBytes(c);
  if (sharesWith(server) && arena_->contains(data, bytes)) {
    header.flags |= net::kFlagInArena;
    return net::copyPayload(net::encode(net::ArenaRef{arena_->offsetOf(data), bytes}));
  }
  return net::sharedPayload(std::shared_ptr<const void>(data, [](const void*) {}), data, bytes);
}

zmq::message_t Worker::pullPayload(size_t c, int server, net::FrameHeader& header) const {
  if (!sharesWith(server)) return zmq::message_t();
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

void Worker::rememberServerConfigs(std::vector<ServerConfig> configs) { configs_ = std::move(configs); }

void Worker::initServers(const std::vector<ServerConfig>& configs, const ChunkValues& values, Deadline deadline) {
  configs_ = configs;
  std::vector<Ticket> tickets;
  for (int i = 0; i < servers(); ++i) {
    const std::string json = toJson(configs.at(static_cast<size_t>(i))).dump();
    tickets.push_back(client_->send(i, {.type = msg::kInit}, net::copyPayload(json)));
  }
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) {
    int64_t applied = 0;
    const std::vector<float> floats = values(c, applied);
    for (int server : options_.layout.chunks[c].holders()) {
      tickets.push_back(client_->send(server, chunkHeader(msg::kSet, c, applied),
                                      net::copyPayload(floats.data(), floats.size() * sizeof(float))));
    }
  }
  for (auto& t : tickets) t.wait(deadline, "the initial parameters");
}

Ticket Worker::sendHello(int server, uint32_t sync_join) {
  Hello hello{options_.index, options_.layout.fingerprint(), options_.generation, sync_join};
  if (arena_ && net::isSameHostEndpoint(options_.servers[static_cast<size_t>(server)].endpoint)) {
    hello.arena = arena_->handle();
  }
  return client_->send(server, {.type = msg::kHello}, net::copyPayload(encode(hello)));
}

HelloAnswer Worker::hello(Deadline deadline, bool replaces_sync_worker) {
  // A joiner sets aside the servers that are dead or not set up: its hello
  // would wait for them, and a sync job's others wait for its join report.
  const bool joins = primaryForwards() ? options_.joining : replaces_sync_worker;
  if (options_.layout.replicas() > 1 && joins) setAsideSilentServers();
  std::vector<std::optional<HelloAnswer>> answers(static_cast<size_t>(servers()));
  std::vector<bool> mapped(answers.size(), false);
  auto answered = [&](int i, Ticket& ticket) {
    const net::Frame reply = ticket.wait(deadline, "hello (is the chief up and the server initialised?)");
    const auto s = static_cast<size_t>(i);
    answers[s] = decodeHelloAnswer(reply.bytes(), options_.servers[s].name);
    mapped[s] = arena_ != nullptr && answers[s]->arena_mapped;
  };
  // A sync replacement asks the first step-clock keeper where it joins,
  // then tells every other server, before its first report lets anyone
  // push that step.
  std::optional<int> asked;
  uint32_t sync_join = Hello::kNotJoining;
  if (replaces_sync_worker) {
    for (int k = 0; k < std::min(servers(), options_.layout.replicas()) && !asked; ++k) {
      if (!client_->lost(k)) asked = k;
    }
    if (!asked) throw PeerError("no step-clock keeper (ps 0, or ps 1 with --ps-replicas 2) is alive to join");
    Ticket ticket = sendHello(*asked, Hello::kAskJoinStep);
    answered(*asked, ticket);
    sync_join = answers[static_cast<size_t>(*asked)]->clock + 1;
  }
  std::vector<std::pair<int, Ticket>> tickets;
  for (int i = 0; i < servers(); ++i) {
    if (!client_->lost(i) && i != asked) tickets.emplace_back(i, sendHello(i, sync_join));
  }
  for (auto& [i, ticket] : tickets) answered(i, ticket);
  // A replacement the other holders feed orders no push while they live:
  // this worker turns to it only if they die, as the others do.
  for (auto& [i, ticket] : tickets) {
    if (!answers[static_cast<size_t>(i)]->fed || !othersHoldEveryChunkOf(i)) continue;
    client_->setAside(i, fmt::format("{} is a replacement that the other holders of its chunks feed; this worker "
                                     "turns to it only if they die",
                                     options_.servers[static_cast<size_t>(i)].name));
  }
  // Where this worker index stands: the first step-clock keeper's answer.
  HelloAnswer first = answers[0].value_or(HelloAnswer{});
  for (int k = 0; k < std::min(servers(), options_.layout.replicas()); ++k) {
    if (!client_->lost(k) && answers[static_cast<size_t>(k)]) {
      first = *answers[static_cast<size_t>(k)];
      break;
    }
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
  Pending& p = pending_[c];
  p.data = data;
  p.step = step;
  // The pull goes out with the push: the server answers it when the update
  // is applied, so apply and transfer overlap the rest of backward. SSP
  // pulls after reportStep().
  if (options_.mode != Mode::Ssp) p.pull_needed = options_.mode == Mode::PsSync ? step + 1 : 0;
  if (p.pull_needed) pull_expected_[c] = true;
  // Every holder gets the push (--ps-replicas 2: both apply it, in the same
  // order, summing the same gradients). The primary's goes behind its
  // window; a backup's goes at once, outside it: the backup acknowledges it
  // only once the step is applied there, and nobody pulls from it, so in
  // the window it would hold up the pushes the next forward waits for.
  // Async and SSP: the primary forwards it to the backup instead.
  const std::vector<int> holders = options_.layout.chunks[c].holders();
  push_tickets_[c].assign(holders.size(), Ticket());
  pushed_[c] = {data, step};
  p.unsent = static_cast<int>(holders.size());
  const size_t window = options_.push_window_bytes;
  for (size_t r = 0; r < holders.size(); ++r) {
    const auto server = static_cast<size_t>(holders[r]);
    if (client_->lost(holders[r])) {
      --p.unsent;  // a lost replica: the other carries the chunk
      if (holders.size() > 1) noteLost(holders[r]);
    } else if (r > 0 && primaryForwards() && !client_->lost(holders[0])) {
      --p.unsent;  // the primary's forward reaches it
    } else if (r > 0 || window == 0 || in_flight_bytes_[server] == 0 ||
               in_flight_bytes_[server] + chunkPushBytes(c) <= window) {
      sendPush(c, r);
    } else {
      waiting_[server].insert(c);
    }
  }
  // Every holder lost: the pull, sent to none, names them.
  if (p.unsent == 0 && p.pull_needed) sendPull(c, *std::exchange(p.pull_needed, std::nullopt));
}

void Worker::sendPush(size_t c, size_t replica) {
  Pending& p = pending_[c];
  const int server = options_.layout.chunks[c].holders()[replica];
  const size_t bytes = chunkPushBytes(c);
  net::FrameHeader header = chunkHeader(msg::kPush, c, p.step);
  zmq::message_t payload = pushPayload(c, server, p.data, header);
  std::function<void()> taken;
  if (options_.push_window_bytes > 0 && replica == 0) {
    in_flight_bytes_[static_cast<size_t>(server)] += bytes;
    taken = [this, server, bytes] { pushTaken(server, bytes); };
  }
  push_tickets_[c][replica] = client_->send(server, header, std::move(payload), std::move(taken));
  // The pull follows the push to the holder that answers pulls.
  if (p.pull_needed && server == pullTarget(c)) sendPull(c, *std::exchange(p.pull_needed, std::nullopt));
  if (--p.unsent <= 0) {
    if (p.pull_needed) sendPull(c, *p.pull_needed);
    p = Pending();
  }
  window_cv_.notify_all();
}

void Worker::sendPull(size_t c, int64_t needed) {
  const int server = pullTarget(c);
  net::FrameHeader header = chunkHeader(msg::kPull, c, needed);
  zmq::message_t request = pullPayload(c, server, header);
  pull_tickets_[c] = client_->send(server, header, std::move(request));
  pull_sent_[c] = {server, needed, client_->lost(server)};
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
    const std::vector<int> holders = options_.layout.chunks[c].holders();
    sendPush(c, static_cast<size_t>(std::find(holders.begin(), holders.end(), server) - holders.begin()));
  }
}

void Worker::pull(size_t c, int64_t needed) {
  std::lock_guard lock(window_mutex_);
  pull_expected_[c] = true;
  // Behind its own push (still waiting for a window): it must see it.
  if (pending_[c].unsent > 0) {
    pending_[c].pull_needed = needed;
    return;
  }
  sendPull(c, needed);
}

void Worker::pullAll(int64_t needed) {
  for (size_t c = 0; c < options_.layout.chunks.size(); ++c) pull(c, needed);
}

void Worker::waitSent(size_t c, Deadline deadline, const std::string& what) {
  std::unique_lock lock(window_mutex_);
  const auto started = Clock::now();
  if (!window_cv_.wait_until(lock, deadline.at(), [&] { return pending_[c].unsent <= 0; })) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    std::vector<std::string> names;
    for (int server : options_.layout.chunks[c].holders()) {
      if (waiting_[static_cast<size_t>(server)].count(c) > 0) names.push_back(options_.servers[static_cast<size_t>(server)].name);
    }
    throw PeerError(fmt::format("{} did not take the pushes ahead of {} (waited {}): is it overloaded or gone?",
                                fmt::join(names, " and "), what, formatDuration(waited)));
  }
}

// --timeline: a push (queued until the server took it) or a pull (queued
// until its version arrived) on the communication lane.
void Worker::trace(const char* what, size_t c, int server, size_t bytes, const Ticket& ticket, int64_t step) const {
  obs::Timeline* timeline = options_.timeline;
  if (timeline == nullptr) return;
  const Ticket::Times t = ticket.times();
  if (t.replied_us == 0) return;
  timeline->span(fmt::format("{} chunk {}", what, c), obs::Lane::kComm, t.queued_us, t.replied_us,
                 {{"server", server}, {"bytes", bytes}, {"step", step}});
}

void Worker::receivePulls(Deadline deadline, int64_t step, const PullSink& sink, size_t end) {
  end = std::min(end, options_.layout.chunks.size());
  for (size_t c = 0; c < end; ++c) {
    {
      std::lock_guard lock(window_mutex_);
      if (!pull_expected_[c]) continue;  // pulled by a host-mate (hierarchical), or already received
    }
    const std::string what = fmt::format("the pull of chunk {} for step {}", c, step);
    waitSent(c, deadline, what);
    net::Frame frame;
    int server = -1;
    for (;;) {
      Ticket ticket;
      bool to_lost = false;
      {
        std::lock_guard lock(window_mutex_);
        ticket = pull_tickets_[c];
        server = pull_sent_[c].server;
        to_lost = pull_sent_[c].to_lost;
      }
      try {
        frame = ticket.wait(deadline, what);
        trace("pull", c, server, chunkWireBytes(c), ticket, step);
        break;
      } catch (const PeerError& e) {
        // Sent while every holder was lost, to one turned to since: it goes again.
        if (!(to_lost && !client_->lost(server))) rethrowUnlessHeld(c, server, e);
      }
      // Its other replica answers instead: the same step, from the same
      // pushes (async: after this worker's own, sent there first).
      std::lock_guard lock(window_mutex_);
      repushToBackup(c);
      sendPull(c, pull_sent_[c].needed);
    }
    {
      std::lock_guard lock(window_mutex_);
      pull_tickets_[c] = Ticket();
      pull_expected_[c] = false;
    }
    const size_t expected = chunkWireBytes(c);
    if ((frame.header.flags & net::kFlagInArena) != 0) {
      // The server wrote the values where this pull asked; nothing else may
      // be named.
      const std::string& name = options_.servers[static_cast<size_t>(server)].name;
      net::ArenaRef ref;
      try {
        ref = net::decodeArenaRef(frame.bytes(), name);
      } catch (const InputError& e) {
        throw PeerError(e.what());
      }
      if (!sharesWith(server) || ref != pullRef(c)) {
        throw PeerError(fmt::format("{} answered the pull of chunk {} with shared memory it was not offered", name, c));
      }
      std::byte* values = arena_->data() + ref.offset;
      frame.payload = zmq::message_t(values, expected, [](void*, void*) {}, nullptr);
    }
    if (frame.payload.size() != expected) {
      throw PeerError(fmt::format("ps {} sent {} bytes for chunk {} ({} expected)", server, frame.payload.size(), c,
                                  expected));
    }
    sink(c, {frame.payload.data(), static_cast<size_t>(options_.layout.chunks[c].length), options_.wire});
  }
}

void Worker::awaitPushes(Deadline deadline, int64_t step) {
  for (size_t c = 0; c < push_tickets_.size(); ++c) {
    const std::string what = fmt::format("the push of chunk {} for step {}", c, step);
    waitSent(c, deadline, what);
    const std::vector<int> holders = options_.layout.chunks[c].holders();
    std::vector<bool> waited(holders.size(), false);
    if (primaryForwards()) {
      // Pushed while every holder was lost: a replacement turned to since takes it.
      std::lock_guard lock(window_mutex_);
      if (std::none_of(push_tickets_[c].begin(), push_tickets_[c].end(), [](const Ticket& t) { return t.valid(); })) {
        repushToBackup(c);
      }
    }
    for (size_t r = 0; r < holders.size(); ++r) {
      Ticket ticket;
      {
        // Read afresh: a failed holder's push may have gone to the other since.
        std::lock_guard lock(window_mutex_);
        if (r < push_tickets_[c].size()) ticket = push_tickets_[c][r];
      }
      if (!ticket.valid() || waited[r]) continue;
      waited[r] = true;
      try {
        ticket.wait(deadline, what);
      } catch (const PeerError& e) {
        rethrowUnlessHeld(c, holders[r], e);
        std::lock_guard lock(window_mutex_);
        repushToBackup(c);
        r = SIZE_MAX;  // from the first holder again: the push may have gone to an earlier one
        continue;
      }
      trace("push", c, holders[r], chunkPushBytes(c), ticket, step);
    }
    std::lock_guard lock(window_mutex_);
    push_tickets_[c].clear();
  }
  for (auto& [server, t] : notice_tickets_) {
    try {
      t.wait(deadline, "a learning rate or ps-alive");
    } catch (const PeerError&) {
      if (!client_->lost(server) || options_.layout.replicas() < 2) throw;
    }
  }
  notice_tickets_.clear();
}

std::vector<FetchedState> Worker::fetchState(int64_t version, int slots, Deadline deadline,
                                           const SnapshotPoint* snapshot,
                                           const std::function<bool(size_t)>& wanted) {
  const std::vector<char> point = snapshot != nullptr ? encode(*snapshot) : std::vector<char>();
  auto ask = [&](size_t c) {
    const int server = pullTarget(c);
    return std::pair(server, client_->send(server, chunkHeader(msg::kState, c, version),
                                           point.empty() ? zmq::message_t() : net::copyPayload(point)));
  };
  std::vector<std::pair<int, Ticket>> tickets(options_.layout.chunks.size());
  for (size_t c = 0; c < tickets.size(); ++c) {
    if (!wanted || wanted(c)) tickets[c] = ask(c);
  }
  std::vector<FetchedState> states(tickets.size());
  for (size_t c = 0; c < tickets.size(); ++c) {
    if (!tickets[c].second.valid()) continue;
    const std::string what = fmt::format("the optimizer state of chunk {}", c);
    net::Frame frame;
    for (;;) {
      try {
        frame = tickets[c].second.wait(deadline, what);
        break;
      } catch (const PeerError& e) {
        rethrowUnlessHeld(c, tickets[c].first, e);
        tickets[c] = ask(c);  // its other replica holds the same state
      }
    }
    const auto length = static_cast<size_t>(options_.layout.chunks[c].length);
    if (frame.payload.size() != length * sizeof(float) * static_cast<size_t>(1 + slots)) {
      throw PeerError(fmt::format("ps {} sent {} bytes of state for chunk {}", tickets[c].first, frame.payload.size(), c));
    }
    FetchedState& state = states[c];
    state.clock = frame.header.clock;
    state.length_ = length;
    state.bytes_ = shared(net::adoptPayload(std::move(frame.payload)));
    state.floats_ = {reinterpret_cast<const float*>(state.bytes_.data()), length * static_cast<size_t>(1 + slots)};
  }
  return states;
}

void Worker::setLearningRate(double lr) {
  if (sent_lr_ == lr) return;
  const std::vector<char> payload = encode(LearningRate{lr});
  for (int i = 0; i < servers(); ++i) {
    // Sent before this step's pushes on the same connection: they see it.
    if (client_->lost(i)) continue;  // a lost replica
    notice_tickets_.emplace_back(i, client_->send(i, {.type = msg::kLr}, net::copyPayload(payload.data(), payload.size())));
  }
  sent_lr_ = lr;
}

void Worker::sayAlive() {
  for (int i = 0; i < servers(); ++i) {
    if (!client_->lost(i)) notice_tickets_.emplace_back(i, client_->send(i, {.type = msg::kAlive}, zmq::message_t()));
  }
}

void Worker::sayDone(Deadline deadline) { sayToEveryServer(msg::kDone, deadline, "the goodbye", false); }

void Worker::sayLeaving(Deadline deadline) {
  sayToEveryServer(msg::kLeave, deadline, "the notice of leaving", true);
}

void Worker::sayToEveryServer(MessageType type, Deadline deadline, const char* what, bool skip_silent) {
  if (done_) return;
  done_ = true;
  // A replica lost earlier (--ps-replicas 2) is not told.
  const bool replicated = options_.layout.replicas() > 1;
  std::vector<std::pair<int, Ticket>> tickets;
  for (int i = 0; i < servers(); ++i) {
    if (replicated && client_->lost(i)) {
      noteLost(i);
    } else {
      tickets.emplace_back(i, client_->send(i, {.type = type}, zmq::message_t()));
    }
  }
  for (auto& [server, t] : tickets) {
    try {
      t.wait(deadline, what);
    } catch (const std::exception&) {
      if (replicated && client_->lost(server)) {
        noteLost(server);
      } else if (!skip_silent) {
        throw;
      }
    }
  }
  {
    std::lock_guard lock(window_mutex_);
    closing_ = true;
  }
  brought_up_.clear();  // their connections too
  probe_.reset();
  client_.reset();  // hang up at once: a server closes once its workers have
}

}  // namespace tandem::ps
