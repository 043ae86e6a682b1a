#include "ps/client.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <random>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/patient_wait.hpp"
#include "net/connection_watch.hpp"
#include "net/job_security.hpp"
#include "net/request_client.hpp"
#include "obs/timeline.hpp"
#include "ps/messages.hpp"
#include "ps/protocol.hpp"

namespace tandem::ps {

struct Ticket::State {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  bool taken = false;  // wait() has handed out the outcome
  bool sent = false;   // ZeroMQ took the request (a timeout then says more)
  // Set by a timed-out wait; read by the I/O thread without the mutex.
  std::atomic<bool> abandoned{false};
  std::optional<net::Frame> reply;
  int64_t queued_us = 0;
  int64_t replied_us = 0;
  std::string failure;  // transport failure (malformed reply, send error)
  std::string server;
  std::string endpoint;
  net::MessageType request_type = net::MessageType::kOk;
  // Weak: a ticket may outlive its client, and then has nobody to tell.
  std::weak_ptr<detail::ClientMailbox> mailbox;
  std::function<void()> on_done;  // run by the I/O thread after completion
};

namespace detail {

struct Outgoing {
  int server = 0;
  net::FrameHeader header;
  zmq::message_t payload;
  std::shared_ptr<Ticket::State> ticket;  // none: connect to `server` anew (PsClient::revive)
  std::string set_aside;                  // with no ticket: set `server` aside, for this reason (PsClient::setAside)
};

// Owns the eventfd, so that a ticket that outlives its client can still
// safely find out there is nobody to wake.
struct ClientMailbox {
  ClientMailbox() : wake_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (wake_fd < 0) throw Error("ps client: eventfd failed");
  }
  ~ClientMailbox() { ::close(wake_fd); }
  ClientMailbox(const ClientMailbox&) = delete;
  ClientMailbox& operator=(const ClientMailbox&) = delete;

  void wake() const {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof(one));
  }
  // A waiter gave up: the I/O thread drops abandoned requests.
  void requestSweep() {
    {
      std::lock_guard lock(mutex);
      sweep = true;
    }
    wake();
  }

  const int wake_fd;
  std::mutex mutex;
  std::vector<Outgoing> queue;
  bool stopping = false;
  bool sweep = false;
};

}  // namespace detail

net::Frame Ticket::wait(Deadline deadline, const std::string& what, const std::function<void()>& meanwhile) {
  TANDEM_ENFORCE(state_ != nullptr, "waiting on an empty ticket");
  State& t = *state_;
  const auto started = Clock::now();
  std::unique_lock lock(t.mutex);
  if (t.taken) {
    throw std::logic_error(fmt::format(
        "Ticket::wait called again for {} to {}: a ticket hands out its reply (or failure) once", what, t.server));
  }
  t.taken = true;
  if (!waitWithStallWarnings(
          t.cv, lock, deadline, [&] { return t.done; }, [&] { return fmt::format("{} to answer {}", t.server, what); },
          {}, meanwhile)) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    const bool sent = t.sent;
    t.abandoned = true;
    lock.unlock();
    // Without this the request would sit in the in-flight map for good.
    if (auto mailbox = t.mailbox.lock()) mailbox->requestSweep();
    if (stopRequested()) {
      throw Interrupted(fmt::format("stopped by a signal while waiting for {} to answer {} (waited {})", t.server,
                                    what, formatDuration(waited)));
    }
    if (sent) throw PeerError(fmt::format("{} did not answer {} (waited {})", t.server, what, formatDuration(waited)));
    throw PeerError(fmt::format("{} did not answer {} (waited {}): the request was never sent, as no connection to {} "
                                "came up; is {} running there{}?",
                                t.server, what, formatDuration(waited), t.endpoint, t.server,
                                net::isSameHostEndpoint(t.endpoint) ? ", with this job's secret" : ""));
  }
  if (!t.failure.empty()) throw PeerError(fmt::format("{}: {} (asked for {})", t.server, t.failure, what));
  net::Frame frame = std::move(*t.reply);
  t.reply.reset();
  lock.unlock();
  if (frame.header.type == net::MessageType::kError) {
    throw Error(fmt::format("{} refused {}: {}", t.server, what, frame.text()));
  }
  net::rejectOwnRequest(t.request_type, frame, t.server, t.endpoint, kMessages);
  const net::MessageType expected = replyTypeOf(t.request_type);
  if (frame.header.type != expected) {
    throw PeerError(fmt::format("{} answered {} ({}) with {}, expected {}", t.server, what,
                                kMessages.nameOf(t.request_type), kMessages.nameOf(frame.header.type),
                                kMessages.nameOf(expected)));
  }
  return frame;
}

PsClient::PsClient(std::vector<ServerAddress> servers, net::JobSecurity security, uint64_t max_payload_bytes,
                   Liveness liveness)
    : servers_(std::move(servers)),
      max_payload_bytes_(max_payload_bytes),
      liveness_(liveness),
      security_(std::move(security)),
      mailbox_(std::make_shared<detail::ClientMailbox>()),
      lost_(std::make_unique<std::atomic<bool>[]>(servers_.size())) {
  io_ = std::thread([this] { ioLoop(); });
}

PsClient::~PsClient() {
  {
    std::lock_guard lock(mailbox_->mutex);
    mailbox_->stopping = true;
  }
  mailbox_->wake();
  io_.join();
}

bool Ticket::ready() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mutex);
  return state_->done && !state_->taken;
}

void PsClient::revive(int server) {
  TANDEM_ENFORCE(server >= 0 && server < servers(), "no such parameter server");
  TANDEM_ENFORCE(lost(server), "revive: {} is not lost", servers_[static_cast<size_t>(server)].name);
  // Cleared here, before any request the caller sends next is queued behind the marker.
  lost_[static_cast<size_t>(server)].store(false);
  {
    std::lock_guard lock(mailbox_->mutex);
    mailbox_->queue.push_back({server, {}, zmq::message_t(), nullptr, {}});
  }
  mailbox_->wake();
}

void PsClient::setAside(int server, std::string why) {
  TANDEM_ENFORCE(server >= 0 && server < servers(), "no such parameter server");
  lost_[static_cast<size_t>(server)].store(true);
  {
    std::lock_guard lock(mailbox_->mutex);
    mailbox_->queue.push_back({server, {}, zmq::message_t(), nullptr, std::move(why)});
  }
  mailbox_->wake();
}

Ticket::Times Ticket::times() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mutex);
  return {state_->queued_us, state_->replied_us};
}

Ticket PsClient::send(int server, net::FrameHeader header, zmq::message_t payload, std::function<void()> on_done) {
  TANDEM_ENFORCE(server >= 0 && server < servers(), "no such parameter server");
  Ticket ticket;
  ticket.state_ = std::make_shared<Ticket::State>();
  const ServerAddress& address = servers_[static_cast<size_t>(server)];
  ticket.state_->server = address.name;
  ticket.state_->endpoint = address.endpoint;
  ticket.state_->request_type = header.type;
  ticket.state_->mailbox = mailbox_;
  ticket.state_->on_done = std::move(on_done);
  ticket.state_->queued_us = obs::Timeline::nowUs();
  {
    std::lock_guard lock(mailbox_->mutex);
    mailbox_->queue.push_back({server, header, std::move(payload), ticket.state_, {}});
  }
  mailbox_->wake();
  return ticket;
}

namespace {

void complete(const std::shared_ptr<Ticket::State>& t, std::optional<net::Frame> reply, std::string failure) {
  {
    std::lock_guard lock(t->mutex);
    t->replied_us = reply ? obs::Timeline::nowUs() : 0;
    t->reply = std::move(reply);
    t->failure = std::move(failure);
    t->done = true;
  }
  t->cv.notify_all();
  if (t->on_done) std::exchange(t->on_done, nullptr)();
}

std::array<uint8_t, 16> randomRoutingId() {
  static thread_local std::mt19937_64 random(std::random_device{}());
  std::array<uint8_t, 16> id{};
  for (size_t i = 0; i < id.size(); i += 8) {
    const uint64_t bits = random();
    std::memcpy(id.data() + i, &bits, 8);
  }
  id[0] |= 1;  // ZeroMQ reserves ids that start with a zero byte
  return id;
}

// One server's requests, as the I/O thread sees them.
struct ServerRequests {
  std::deque<detail::Outgoing> unsent;  // in order; waiting for the connection
  std::map<uint64_t, std::shared_ptr<Ticket::State>> sent;  // by request id
};

}  // namespace

void PsClient::ioLoop() {
  detail::ClientMailbox& box = *mailbox_;
  zmq::context_t context(1);
  std::vector<zmq::socket_t> sockets(servers_.size());
  std::vector<std::unique_ptr<net::LinkWatch>> links(servers_.size());
  auto connect = [&](size_t s) {
    const ServerAddress& address = servers_[s];
    links[s].reset();
    sockets[s] = zmq::socket_t(context, zmq::socket_type::dealer);
    zmq::socket_t& socket = sockets[s];
    net::configureSocket(socket, max_payload_bytes_, net::isIpv6(address.endpoint));
    // Pipelined chunks must never be dropped or block the loop.
    socket.set(zmq::sockopt::sndhwm, 0);
    socket.set(zmq::sockopt::rcvhwm, 0);
    // Queue nothing towards a connection that is not up: unsent requests
    // wait in `unsent`, where a timed-out wait can still withdraw them.
    socket.set(zmq::sockopt::immediate, 1);
    // Any traffic counts as an answer, so bulk data never looks like silence.
    socket.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(liveness_.heartbeat_interval.count()));
    socket.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(liveness_.heartbeat_timeout.count()));
    // A connection attempt to a host gone silent is retried after this, not the kernel's minutes.
    socket.set(zmq::sockopt::connect_timeout, static_cast<int>(liveness_.heartbeat_timeout.count()));
    // Same-host Unix sockets are kept private by the file system instead.
    if (!net::isSameHostEndpoint(address.endpoint)) net::secureClient(socket, security_);
    // A server serves two sockets (TCP and same-host), each numbering its
    // peers on its own: a random 16-byte id cannot collide across them.
    socket.set(zmq::sockopt::routing_id, zmq::buffer(randomRoutingId()));
    links[s] = std::make_unique<net::LinkWatch>(context, socket);
    socket.connect(address.endpoint);
  };
  for (size_t s = 0; s < servers_.size(); ++s) connect(s);
  std::vector<ServerRequests> requests(servers_.size());
  // By server: why its requests fail at once (empty while its link holds).
  std::vector<std::string> lost(servers_.size());
  // By server: revived, and its new link not up yet. A revived server was
  // seen up first (a status answered on a connection of its own), so a
  // connection it refuses, or one not made within the heartbeat timeout,
  // means it died since: it is lost again at once, instead of holding the
  // requests to their deadline. A slow but live server's kernel still
  // accepts the connection, so its slowness is never taken for that.
  std::vector<bool> revived(servers_.size(), liveness_.seen_up);
  uint64_t next_id = 1;
  std::vector<zmq_pollitem_t> items;
  items.push_back({nullptr, box.wake_fd, ZMQ_POLLIN, 0});
  for (auto& s : sockets) items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
  const size_t first_link = items.size();
  for (auto& l : links) items.push_back({l->events().handle(), 0, ZMQ_POLLIN, 0});
  std::vector<zmq::message_t> parts;
  std::vector<detail::Outgoing> batch;

  // Sends what the connection takes, in order; the rest waits for POLLOUT.
  auto flush = [&](size_t s) {
    auto& unsent = requests[s].unsent;
    if (!lost[s].empty()) {
      for (auto& o : unsent) complete(o.ticket, std::nullopt, lost[s]);
      unsent.clear();
      return;
    }
    while (!unsent.empty()) {
      detail::Outgoing& out = unsent.front();
      if (!out.ticket->abandoned) {
        // A copy shares the payload's buffer, so a refused send loses nothing.
        zmq::message_t attempt;
        attempt.copy(out.payload);
        try {
          if (!net::sendFrame(sockets[s], out.header, std::move(attempt))) return;  // not connected yet
          {
            std::lock_guard lock(out.ticket->mutex);
            out.ticket->sent = true;
          }
          requests[s].sent[out.header.request_id] = out.ticket;
        } catch (const zmq::error_t& e) {
          complete(out.ticket, std::nullopt,
                   fmt::format("could not send {} to {}: {}", kMessages.nameOf(out.header.type),
                               servers_[s].endpoint, e.what()));
        }
      }
      unsent.pop_front();
    }
  };
  auto dropAbandoned = [&] {
    for (auto& r : requests) {
      std::erase_if(r.unsent, [](const detail::Outgoing& o) { return o.ticket->abandoned.load(); });
      std::erase_if(r.sent, [](const auto& entry) { return entry.second->abandoned.load(); });
    }
  };
  auto failAll = [&](const std::string& why) {
    for (auto& r : requests) {
      for (auto& o : r.unsent) complete(o.ticket, std::nullopt, why);
      for (auto& [id, ticket] : r.sent) complete(ticket, std::nullopt, why);
      r.unsent.clear();
      r.sent.clear();
    }
  };

  // Takes every reply waiting on server s's socket.
  auto receive = [&](size_t s) {
    while (size_t total = net::receiveParts(sockets[s], parts, 2)) {
      auto& pending = requests[s].sent;
      try {
        net::Frame frame = net::decodeFrame(parts, total, max_payload_bytes_, servers_[s].name, kMessages);
        auto it = pending.find(frame.header.request_id);
        if (it == pending.end()) {
          // Ids are never reused, so this cannot be taken for another reply.
          TANDEM_LOG_WARN("{} answered request {} that nobody waits for (its wait timed out); dropped",
                          servers_[s].name, frame.header.request_id);
          continue;
        }
        complete(it->second, std::move(frame), "");
        pending.erase(it);
      } catch (const InputError& e) {
        // A malformed reply cannot be matched to its request: fail them all.
        for (auto& [id, ticket] : pending) complete(ticket, std::nullopt, e.what());
        pending.clear();
      }
    }
  };

  while (true) {
    bool waiting_to_send = false;
    for (size_t s = 0; s < sockets.size(); ++s) {
      const bool unsent = !requests[s].unsent.empty();
      items[s + 1].events = static_cast<short>(ZMQ_POLLIN | (unsent ? ZMQ_POLLOUT : 0));
      waiting_to_send = waiting_to_send || unsent;
    }
    // POLLOUT wakes us when a connection comes up; the timeout is a backstop.
    const auto timeout = waiting_to_send ? std::chrono::milliseconds(100) : std::chrono::milliseconds(-1);
    if (!net::pollItems(items, timeout)) continue;
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] auto n = ::read(box.wake_fd, &count, sizeof(count));
      bool stop = false, sweep = false;
      {
        std::lock_guard lock(box.mutex);
        batch.swap(box.queue);
        stop = box.stopping;
        sweep = box.sweep;
        box.sweep = false;
      }
      for (auto& out : batch) {
        const size_t server = static_cast<size_t>(out.server);
        if (!out.ticket && !out.set_aside.empty()) {
          lost[server] = out.set_aside;
          for (auto& [id, ticket] : requests[server].sent) complete(ticket, std::nullopt, lost[server]);
          requests[server].sent.clear();
          continue;
        }
        if (!out.ticket) {
          // Whatever was asked of the lost connection fails with it; what
          // follows goes to whoever answers at its address now.
          flush(server);
          connect(server);
          items[server + 1].socket = sockets[server].handle();
          items[first_link + server].socket = links[server]->events().handle();
          lost[server].clear();
          revived[server] = true;
          continue;
        }
        out.header.request_id = next_id++;
        requests[server].unsent.push_back(std::move(out));
      }
      batch.clear();
      if (sweep) dropAbandoned();
      if (stop) {
        failAll("the client was closed before the reply came");
        in_flight_ = 0;
        break;
      }
    }
    for (size_t s = 0; s < sockets.size(); ++s) {
      if (items[s + 1].revents & ZMQ_POLLIN) receive(s);
    }
    for (size_t s = 0; s < sockets.size(); ++s) {
      if (!(items[first_link + s].revents & ZMQ_POLLIN)) continue;
      links[s]->update();
      if (links[s]->linksUp() > 0) revived[s] = false;
      if (!lost[s].empty()) continue;
      if (revived[s] && links[s]->connectsRetried() > 0) {
        revived[s] = false;
        lost[s] = fmt::format("{} refused or timed out the connection, though it was up before: the server there "
                              "exited since (a replacement: it died before it was set up)",
                              servers_[s].endpoint);
      } else if (links[s]->handshakesFailed() > 0) {
        lost[s] = fmt::format("refused this task's handshake at {}: the two hold different job secrets, or one "
                              "holds none (--secret-file, TANDEM_SECRET_FILE, --insecure)",
                              servers_[s].endpoint);
      } else if (links[s]->linksLost() > 0) {
        receive(s);  // replies that arrived before the link went down still count
        lost[s] = fmt::format(
            "the connection to {} was lost: the server exited, or its host answered no heartbeat for {}; "
            "requests are never replayed to whatever answers there next",
            servers_[s].endpoint, formatDuration(liveness_.heartbeat_timeout));
      } else {
        continue;
      }
      lost_[s].store(true);
      if (!requests[s].sent.empty() || !requests[s].unsent.empty()) {
        TANDEM_LOG_ERROR("{}: {} ({} requests unanswered)", servers_[s].name, lost[s],
                         requests[s].sent.size() + requests[s].unsent.size());
      }
      for (auto& [id, ticket] : requests[s].sent) complete(ticket, std::nullopt, lost[s]);
      requests[s].sent.clear();
    }
    for (size_t s = 0; s < sockets.size(); ++s) flush(s);
    size_t held = 0;
    for (const auto& r : requests) held += r.unsent.size() + r.sent.size();
    in_flight_ = held;
  }
}

}  // namespace tandem::ps
