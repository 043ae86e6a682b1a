#pragma once
// A worker's connections to every parameter server, driven by one I/O
// thread. Any thread may send; requests are queued to the I/O thread (woken
// through an eventfd) and many may be in flight per server. Each request
// returns a Ticket that the caller waits on with a deadline. Torch-free.
#include <zmq.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/deadline.hpp"
#include "net/frame.hpp"

namespace tandem::ps {

struct ServerAddress {
  std::string endpoint;  // tcp://host:port
  std::string name;      // "ps 0": how errors name it
};

// The eventual reply to one request.
class Ticket {
 public:
  Ticket() = default;
  bool valid() const { return state_ != nullptr; }
  // Waits for the reply. Throws PeerError naming the server and `what` when
  // none came by the deadline, Error carrying the server's reason when it
  // answered kError.
  net::Frame wait(Deadline deadline, const std::string& what);

 private:
  friend class PsClient;

 public:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::optional<net::Frame> reply;
    std::string failure;  // transport failure (malformed reply)
    std::string server;
  };

 private:
  std::shared_ptr<State> state_;
};

class PsClient {
 public:
  explicit PsClient(std::vector<ServerAddress> servers, uint64_t max_payload_bytes = net::kMaxPayloadBytes);
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Queues a request to `server`; thread-safe. The payload may be zero-copy
  // (net::sharedPayload): its bytes must stay unchanged until the reply.
  Ticket send(int server, net::FrameHeader header, zmq::message_t payload);

  int servers() const { return static_cast<int>(servers_.size()); }

 private:
  struct Outgoing {
    int server;
    net::FrameHeader header;
    zmq::message_t payload;
    std::shared_ptr<Ticket::State> ticket;
  };
  void ioLoop();

  std::vector<ServerAddress> servers_;
  uint64_t max_payload_bytes_;
  int wake_fd_ = -1;
  std::mutex mutex_;
  std::vector<Outgoing> queue_;
  bool stopping_ = false;
  std::thread io_;
};

}  // namespace tandem::ps
