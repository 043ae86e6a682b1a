#include "net/connection_watch.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "net/frame.hpp"

namespace tandem::net {

namespace {

constexpr int kHandshakeFailures =
    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

// Connects `events` to a fresh monitor of `socket` for `mask`.
void monitor(zmq::socket_t& socket, zmq::socket_t& events, int mask) {
  static std::atomic<uint64_t> next{0};
  const std::string endpoint = fmt::format("inproc://tandem-connection-watch-{}", next++);
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), mask) != 0) {
    throw Error(fmt::format("cannot monitor a socket's connections: {}", zmq_strerror(zmq_errno())));
  }
  // Unbounded, so that the monitor never blocks ZeroMQ's I/O thread; the
  // owner reads often enough to keep the queue short.
  events.set(zmq::sockopt::rcvhwm, 0);
  events.set(zmq::sockopt::linger, 0);
  events.connect(endpoint);
}

// Hands each queued event's type to `seen`.
template <class Seen>
void drain(zmq::socket_t& events, Seen seen) {
  zmq::message_t event;
  zmq::message_t address;
  while (events.recv(event, zmq::recv_flags::dontwait)) {
    // [uint16 event, uint32 value][endpoint]; the second part always follows.
    if (event.more()) (void)events.recv(address);
    uint16_t type = 0;
    if (event.size() >= sizeof(type)) std::memcpy(&type, event.data(), sizeof(type));
    seen(type);
  }
}

}  // namespace

ConnectionWatch::ConnectionWatch(zmq::context_t& context, zmq::socket_t& socket)
    : events_(context, zmq::socket_type::pair) {
  monitor(socket, events_, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED);
}

int ConnectionWatch::open() {
  drain(events_, [this](uint16_t type) {
    if (type == ZMQ_EVENT_ACCEPTED) ++open_;
    if (type == ZMQ_EVENT_DISCONNECTED && open_ > 0) --open_;
  });
  return open_;
}

bool ConnectionWatch::waitUntilAtMost(std::initializer_list<ConnectionWatch*> watches, int connections,
                                      std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  std::vector<zmq_pollitem_t> items;
  for (ConnectionWatch* w : watches) {
    if (w != nullptr) items.push_back({w->events_.handle(), 0, ZMQ_POLLIN, 0});
  }
  auto open = [&] {
    int total = 0;
    for (ConnectionWatch* w : watches) total += w != nullptr ? w->open() : 0;
    return total;
  };
  while (open() > connections) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    (void)pollItems(items, left);
  }
  return true;
}

LinkWatch::LinkWatch(zmq::context_t& context, zmq::socket_t& socket) : events_(context, zmq::socket_type::pair) {
  monitor(socket, events_,
          ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED | kHandshakeFailures);
}

void LinkWatch::update() {
  drain(events_, [this](uint16_t type) {
    if (type == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) ++up_;
    // A link that never completed its handshake (a refused or half-made
    // connection) was never up, so it is not lost either.
    if (type == ZMQ_EVENT_DISCONNECTED && up_ > lost_) ++lost_;
    if ((type & kHandshakeFailures) != 0) ++failed_;
    if (type == ZMQ_EVENT_CONNECT_RETRIED) ++retried_;
  });
}

}  // namespace tandem::net
