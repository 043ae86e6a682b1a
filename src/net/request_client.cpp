#include "net/request_client.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "net/job_security.hpp"

namespace tandem::net {

RequestClient::RequestClient(zmq::context_t& context, std::string endpoint, std::string peer_name,
                             const MessageCatalog& protocol, JobSecurity security, uint64_t max_payload_bytes)
    : context_(context),
      endpoint_(std::move(endpoint)),
      peer_name_(std::move(peer_name)),
      protocol_(protocol),
      security_(std::move(security)),
      max_payload_bytes_(max_payload_bytes) {
  connect();
}

void RequestClient::connect() {
  link_.reset();
  socket_.reset();
  socket_.emplace(context_, zmq::socket_type::dealer);
  configureSocket(*socket_, max_payload_bytes_, isIpv6(endpoint_));
  socket_->set(zmq::sockopt::heartbeat_ivl, static_cast<int>(kHeartbeatInterval.count()));
  socket_->set(zmq::sockopt::heartbeat_timeout, static_cast<int>(kHeartbeatTimeout.count()));
  secureClient(*socket_, security_);
  link_.emplace(context_, *socket_);
  socket_->connect(endpoint_);
}

void RequestClient::disconnect() {
  link_.reset();
  socket_.reset();
}

std::optional<Frame> RequestClient::request(FrameHeader header, zmq::message_t payload, Deadline deadline) {
  if (!socket_) connect();
  const uint64_t id = next_request_id_++;
  header.request_id = id;
  // With one request in flight the DEALER's queue never fills; if it does
  // anyway, the peer is as good as silent.
  if (!sendFrame(*socket_, header, std::move(payload))) {
    disconnect();
    return std::nullopt;
  }
  link_->update();
  const uint64_t lost_before = link_->linksLost();
  const uint64_t refused_before = link_->handshakesFailed();
  std::vector<zmq::message_t> parts;
  while (true) {
    std::array<zmq_pollitem_t, 2> items{zmq_pollitem_t{socket_->handle(), 0, ZMQ_POLLIN, 0},
                                        zmq_pollitem_t{link_->events().handle(), 0, ZMQ_POLLIN, 0}};
    const bool woke = pollItems(items, deadline.remaining());
    size_t total = woke && (items[0].revents & ZMQ_POLLIN) ? receiveParts(*socket_, parts, 2) : 0;
    if (total == 0) {
      link_->update();
      if (link_->handshakesFailed() > refused_before) {
        disconnect();
        throw PeerError(fmt::format("{} ({}) refused this task's handshake: the two hold different job secrets, or "
                                    "one holds none (--secret-file, TANDEM_SECRET_FILE, --insecure)",
                                    peer_name_, endpoint_));
      }
      if (link_->linksLost() > lost_before) {
        disconnect();
        throw PeerError(fmt::format("{} ({}) dropped the connection before answering {}: it exited, or its host "
                                    "answered no heartbeat for {}",
                                    peer_name_, endpoint_, protocol_.nameOf(header.type),
                                    formatDuration(kHeartbeatTimeout)));
      }
      if (deadline.expired()) {
        // Close with linger 0: a still-queued request dies with the socket.
        disconnect();
        return std::nullopt;
      }
      continue;
    }
    Frame frame = decodeFrame(parts, total, max_payload_bytes_, peer_name_, protocol_);
    if (frame.header.request_id == id) {
      // A socket connected to itself stays so: the next request starts afresh.
      if (frame.header.type == header.type) disconnect();
      rejectOwnRequest(header.type, frame, peer_name_, endpoint_, protocol_);
      return frame;
    }
    // Otherwise a late reply to a request we gave up on: drop it.
  }
}

void rejectOwnRequest(MessageType request, const Frame& reply, std::string_view peer, std::string_view endpoint,
                      const MessageCatalog& protocol) {
  if (reply.header.type != request) return;
  throw PeerError(fmt::format(
      "{}: received our own request back ({}): the socket connected to itself at {}; nothing listens there "
      "(a loopback reconnect to a port in the ephemeral range can land on its own socket). Is {} running at {}?",
      peer, protocol.nameOf(request), endpoint, peer, endpoint));
}

std::chrono::milliseconds budgetOf(Deadline deadline) {
  double ms = std::chrono::duration<double, std::milli>(deadline.at() - Clock::now()).count();
  if (ms <= 0) return std::chrono::milliseconds(0);
  double step = ms < 10000 ? 10 : 1000;
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms / step) * step));
}

}  // namespace tandem::net
