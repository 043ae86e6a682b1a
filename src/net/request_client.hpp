#pragma once
// Synchronous request/reply over a ZeroMQ DEALER, one request in flight at a
// time: the building block for talking to a ROUTER-based server (the
// coordinator store now, simple parameter-server calls later).
//
// Each request carries a fresh request id and only a reply with that id is
// accepted, so a late answer to an abandoned request is never taken for the
// answer to a newer one. When a request times out the socket is replaced,
// which drops the request if it is still queued (e.g. the server was not up).
//
// A request whose server drops an established connection (it exited, or
// its host answered no heartbeat for kHeartbeatTimeout) fails at once with
// PeerError instead of waiting out its deadline.
#include <zmq.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "core/deadline.hpp"
#include "core/patient_wait.hpp"
#include "net/connection_watch.hpp"
#include "net/frame.hpp"
#include "net/job_security.hpp"

namespace tandem::net {

// Throws PeerError when `reply` has the request's own type. No server answers
// a request with its own type; but a DEALER that reconnects on loopback to a
// port in the ephemeral range, while nothing listens there, can connect to
// itself (TCP simultaneous open) and read back what it sent. `peer` and
// `endpoint` name the server it meant to reach.
void rejectOwnRequest(MessageType request, const Frame& reply, std::string_view peer, std::string_view endpoint,
                      const MessageCatalog& protocol);

// Not thread-safe: use one RequestClient per thread.
class RequestClient {
 public:
  static constexpr std::chrono::milliseconds kHeartbeatInterval{1'000};
  static constexpr std::chrono::milliseconds kHeartbeatTimeout{5'000};

  // `endpoint` is "tcp://host:port"; `peer_name` names the server in errors;
  // replies are frames of `protocol`; `security` is the job's. Connecting
  // never fails, even while nobody listens yet. `context` and `protocol`
  // must outlive the client.
  RequestClient(zmq::context_t& context, std::string endpoint, std::string peer_name,
                const MessageCatalog& protocol, JobSecurity security, uint64_t max_payload_bytes = kMaxPayloadBytes);

  // Sends `header` (its request_id is assigned here) with `payload` and
  // waits for the matching reply until `deadline`. Returns nullopt if none
  // came in time. Throws InputError naming the peer when a reply is
  // malformed, PeerError when it is our own request (rejectOwnRequest) or
  // the server dropped the connection before answering.
  std::optional<Frame> request(FrameHeader header, zmq::message_t payload, Deadline deadline);

  const std::string& peerName() const { return peer_name_; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void connect();
  void disconnect();

  zmq::context_t& context_;
  std::string endpoint_;
  std::string peer_name_;
  const MessageCatalog& protocol_;
  JobSecurity security_;
  uint64_t max_payload_bytes_;
  std::optional<zmq::socket_t> socket_;
  std::optional<LinkWatch> link_;  // follows socket_; closed first
  uint64_t next_request_id_ = 1;  // 0 is what a server uses when it cannot tell
};


// The time left before `deadline`, rounded (to 10 ms below 10 s, to 1 s
// above) so that a budget the caller set reads as they set it even after a
// few milliseconds went by: for "did not answer within 30s".
std::chrono::milliseconds budgetOf(Deadline deadline);

}  // namespace tandem::net
