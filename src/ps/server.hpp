#pragma once
// One parameter server: holds its share of the parameter chunks and their
// optimizer state, applies pushed gradients with the server-side optimizer,
// and answers pulls. Server 0 also keeps the workers' step clocks (sync
// barrier, bounded staleness, agreed loss and stop).
//
// Threads: one I/O thread (the caller of serve()) owns the ROUTER socket and
// all bookkeeping; an apply pool runs the optimizer on chunks, one job per
// chunk at a time, and hands completions back through an eventfd. Every
// frame is validated before use; a bad one gets an error reply naming the
// problem and the server keeps serving everyone else. Torch-free.
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "net/frame.hpp"
#include "net/job_security.hpp"
#include "obs/timeline.hpp"

namespace tandem::ps {

// Requests one peer may have queued at a server before it stops reading
// from that peer's connection.
inline constexpr int kReceiveHighWaterMark = 4096;

struct ServerOptions {
  std::string bind_host = "127.0.0.1";  // an address, or "*"
  int port = 0;                         // 0: any free port (see ParameterServer::port)
  int index = 0;                        // this server's index among the PS tasks
  int apply_threads = 1;
  double startup_timeout_s = 60;        // how long to wait for the chief's init
  uint64_t max_payload_bytes = net::kMaxPayloadBytes;
  // Fault injection for tests: runs on the apply thread before each update
  // of a chunk, with the chunk's key and update index; throwing from it
  // stands for an apply that failed.
  std::function<void(uint64_t key, uint64_t update)> apply_fault = nullptr;
  // --timeline: each push's wait in the queue, each apply and each pull's
  // wait for its version, as spans (the caller owns and writes it).
  obs::Timeline* timeline = nullptr;
};

class ParameterServer {
 public:
  // Binds, admitting the members of the job `security` belongs to. Throws
  // Error naming the address when it cannot.
  ParameterServer(ServerOptions options, const net::JobSecurity& security);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  int port() const;
  std::string name() const;  // "ps 0"

  // Serves until every worker has said it is done or has been silent for the
  // peer timeout, or `abort` becomes true. Returns the server's summary:
  // updates, bytes, apply time, the largest staleness a worker was allowed,
  // and the workers that went silent ("lost_workers"). Throws PeerError when
  // the chief never initialises the server within the startup timeout,
  // Interrupted when the process is asked to stop before that, and
  // Error naming the chunk when an apply job failed (its values are then
  // half-updated, so the server stops rather than serve them).
  nlohmann::json serve(const std::atomic<bool>* abort = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::ps
