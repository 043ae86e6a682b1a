#pragma once

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <initializer_list>

namespace tandem::net {

// Counts the connections a listening socket has open, from its monitor
// events. A server closes only after its peers hung up: libzmq 4.3 can drop a
// reply queued just before close even with a linger (measured: 12 of 300
// replies lost on ipc and tcp; none once the server waits for the hang-up).
class ConnectionWatch {
 public:
  // Attach before binding, so that every accepted connection is counted.
  ConnectionWatch(zmq::context_t& context, zmq::socket_t& socket);
  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;

  // Takes in the events queued so far; returns the connections open now.
  int open();
  // Waits until at most `connections` are open or `limit` passed; true if so.
  bool waitUntilAtMost(int connections, std::chrono::milliseconds limit) {
    return waitUntilAtMost({this}, connections, limit);
  }
  // The same over several sockets' watches (null entries are skipped).
  static bool waitUntilAtMost(std::initializer_list<ConnectionWatch*> watches, int connections,
                              std::chrono::milliseconds limit);

 private:
  zmq::socket_t events_;
  int open_ = 0;
};

// Follows a connecting socket's link to its one peer, from its monitor
// events: how often a handshake succeeded, and how often an established link
// went down since (the peer exited, or stopped answering heartbeats).
class LinkWatch {
 public:
  // Attach before connecting.
  LinkWatch(zmq::context_t& context, zmq::socket_t& socket);
  LinkWatch(const LinkWatch&) = delete;
  LinkWatch& operator=(const LinkWatch&) = delete;

  // Readable when events are queued: poll it beside the socket.
  zmq::socket_t& events() { return events_; }
  // Takes in the events queued so far.
  void update();
  uint64_t linksUp() const { return up_; }
  uint64_t linksLost() const { return lost_; }
  // Connections the peer's ZeroMQ refused in the handshake: with CURVE,
  // the two ends hold different job secrets (or one holds none).
  uint64_t handshakesFailed() const { return failed_; }
  // Connection attempts that failed and are retried: nothing listens at
  // the address (refused), or the attempt timed out (ZMQ_CONNECT_TIMEOUT).
  uint64_t connectsRetried() const { return retried_; }

 private:
  zmq::socket_t events_;
  uint64_t up_ = 0;
  uint64_t lost_ = 0;
  uint64_t failed_ = 0;
  uint64_t retried_ = 0;
};

}  // namespace tandem::net
