#include "net/connection_watch.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstring>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "net/frame.hpp"

namespace tandem::net {

ConnectionWatch::ConnectionWatch(zmq::context_t& context, zmq::socket_t& socket)
    : events_(context, zmq::socket_type::pair) {
  static std::atomic<uint64_t> next{0};
  const std::string endpoint = fmt::format("inproc://tandem-connection-watch-{}", next++);
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    throw Error(fmt::format("cannot monitor a socket's connections: {}", zmq_strerror(zmq_errno())));
  }
  // Unbounded, so that the monitor never blocks ZeroMQ's I/O thread; open()
  // is called often enough to keep the queue short.
  events_.set(zmq::sockopt::rcvhwm, 0);
  events_.set(zmq::sockopt::linger, 0);
  events_.connect(endpoint);
}

int ConnectionWatch::open() {
  zmq::message_t event;
  zmq::message_t address;
  while (events_.recv(event, zmq::recv_flags::dontwait)) {
    // [uint16 event, uint32 value][endpoint]; the second part always follows.
    if (event.more()) (void)events_.recv(address);
    uint16_t type = 0;
    if (event.size() >= sizeof(type)) std::memcpy(&type, event.data(), sizeof(type));
    if (type == ZMQ_EVENT_ACCEPTED) ++open_;
    if (type == ZMQ_EVENT_DISCONNECTED && open_ > 0) --open_;
  }
  return open_;
}

bool ConnectionWatch::waitUntilAtMost(int connections, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (open() > connections) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    (void)waitReadable(events_, left);
  }
  return true;
}

}  // namespace tandem::net
