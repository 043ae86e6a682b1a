#pragma once
// A worker's connections to every parameter server, driven by one I/O
// thread. Any thread may send; requests are queued to the I/O thread (woken
// through an eventfd) and many may be in flight per server. Each request
// returns a Ticket that the caller waits on with a deadline. Torch-free.
//
// The DEALER sockets use ZMQ_IMMEDIATE: a request is handed to ZeroMQ only
// once its server's connection is up, and waits in the client until then
// (never longer than its caller waits), so nothing is queued towards a peer
// that is not there.
//
// A server whose established connection drops (it exited, or its host
// stopped answering ZeroMQ heartbeats) is lost: its unanswered requests fail
// at once, naming it, and so does every later request to it, until the
// caller revives it (a replacement at the same address, taken back at a
// step the workers agreed on). No request is replayed to whatever answers
// at that address next.
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/deadline.hpp"
#include "net/frame.hpp"
#include "net/job_security.hpp"

namespace tandem::ps {

struct ServerAddress {
  std::string endpoint;  // tcp://host:port
  std::string name;      // "ps 0": how errors name it
};

namespace detail {
struct ClientMailbox;  // what callers and the I/O thread share
}  // namespace detail

// The eventual reply to one request.
class Ticket {
 public:
  Ticket() = default;
  bool valid() const { return state_ != nullptr; }
  // Waits for the reply and hands it out. A ticket yields its outcome once:
  // any later wait() throws std::logic_error, whatever the first returned or
  // threw (the reply was moved out; a timed-out request was abandoned).
  // Throws PeerError naming the server and `what` when no reply came by the
  // deadline (the request is then dropped from the client, and a late reply
  // is ignored), when the request could not be sent, or when the reply is
  // not a reply to it (our own request read back by a socket connected to
  // itself, or a type the request is never answered with); Error carrying
  // the server's reason when it answered kError. `meanwhile` runs every
  // 100 ms while it waits (waitWithStallWarnings). Thread-safe.
  net::Frame wait(Deadline deadline, const std::string& what, const std::function<void()>& meanwhile = {});

  // When the request was queued and when its reply arrived, in the
  // timeline's microseconds (obs::Timeline::nowUs); replied_us is 0 before
  // the reply. Thread-safe.
  struct Times {
    int64_t queued_us = 0;
    int64_t replied_us = 0;
  };
  Times times() const;
  // Whether a wait() now would return at once: the request was answered or
  // failed, and its outcome not yet handed out. Thread-safe.
  bool ready() const;

  struct State;  // shared with the client's I/O thread

 private:
  friend class PsClient;
  std::shared_ptr<State> state_;
};

// How a client tells a dead server from a slow one. A process that exits is
// seen at once (its kernel closes the connection); a host that goes silent
// is seen once no heartbeat answer came for `heartbeat_timeout`.
struct Liveness {
  std::chrono::milliseconds heartbeat_interval{1'000};
  std::chrono::milliseconds heartbeat_timeout{5'000};
  // Every server answered before this client was made (a server's link to
  // the other holder it forwards to): a connection refused then means the
  // server died, and it is lost at once, as a revived one is.
  bool seen_up = false;
};

class PsClient {
 public:
  // `security`: the job's, for its connections to the servers.
  PsClient(std::vector<ServerAddress> servers, net::JobSecurity security,
           uint64_t max_payload_bytes = net::kMaxPayloadBytes, Liveness liveness = {});
  // Stops the I/O thread; tickets still open fail with "client closed".
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Queues a request to `server`; thread-safe. The payload may be zero-copy
  // (net::sharedPayload): its bytes must stay unchanged until the reply.
  // `on_done`, when set, runs on the I/O thread once the request is answered
  // or has failed (a push window sends its next request from it); it must
  // not wait on tickets.
  Ticket send(int server, net::FrameHeader header, zmq::message_t payload, std::function<void()> on_done = {});

  int servers() const { return static_cast<int>(servers_.size()); }

  // Requests the I/O thread holds, sent or waiting for a connection, that
  // are neither answered, failed nor abandoned by a timed-out wait.
  // Thread-safe; for tests and progress displays.
  size_t inFlight() const { return in_flight_.load(); }

  // Whether `server` is lost for good (its requests fail at once). Set
  // before the requests it failed are completed, so a waiter woken by such
  // a failure sees it. Thread-safe.
  bool lost(int server) const { return lost_[static_cast<size_t>(server)].load(); }

  // A lost server's replacement: connects to its address anew, so that
  // requests sent from now on go to whatever answers there (those sent
  // before failed with the old connection). It is lost again if that
  // connection drops, or if the new connection is refused or times out
  // (it died since it was seen up). Thread-safe; `server` must be lost.
  void revive(int server);
  // Treats `server` as lost from now on (`why` fails its requests), though
  // its connection may hold: a worker sets aside a replacement that the
  // other holders feed, until they die. revive() takes it back.
  void setAside(int server, std::string why);

 private:
  void ioLoop();

  std::vector<ServerAddress> servers_;
  uint64_t max_payload_bytes_;
  Liveness liveness_;
  net::JobSecurity security_;  // used by the I/O thread
  std::shared_ptr<detail::ClientMailbox> mailbox_;
  std::atomic<size_t> in_flight_{0};
  std::unique_ptr<std::atomic<bool>[]> lost_;  // by server
  std::thread io_;
};

}  // namespace tandem::ps
