#pragma once
// The chief's coordination store, served over ZeroMQ, and the client every
// task uses to reach it. The client is a KeyValueStore, so collectives
// rendezvous through it; Tandem's own membership and fingerprint checks use
// the same keys-and-values vocabulary.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/job_security.hpp"
#include "cluster/cluster_spec.hpp"
#include "cluster/kv_store.hpp"
#include "cluster/quorum.hpp"
#include "core/deadline.hpp"

namespace tandem::cluster {

// What the store holds at most: a member that fills it is refused, it
// never grows the chief without bound. A job's own records (join records,
// Gloo's addresses, host addresses) are kilobytes per worker.
inline constexpr size_t kMaxStoreValueBytes = size_t{16} << 20;
inline constexpr size_t kMaxStoreBytes = size_t{256} << 20;
inline constexpr size_t kMaxStoreKeys = size_t{1} << 16;

// Serves the key-value store on a background thread until destroyed.
// Keys are write-once-or-overwrite byte strings; `get` requests for a key
// that is not there yet are answered "not found" (clients retry), so a
// request never parks the server. Malformed requests get an error reply
// and are otherwise ignored. Thread-safe.
class CoordinatorServer {
 public:
  // Binds tcp://<address>:<port>, the address bindableAddress(bind_host)
  // gives; port 0 picks a free port. Throws Error naming the address if it
  // cannot bind, InputError for a name that is not this machine's. Admits
  // the members of the job `security` belongs to.
  CoordinatorServer(const std::string& bind_host, int port, const net::JobSecurity& security);
  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  int port() const;

  // From now on, also answers quorum requests: a job of `workers` at
  // `first_step` whose membership may change (cluster/quorum.hpp). Until
  // then they are refused; a quorum hosted already stays (the chief's
  // request, CoordinatorClient::hostQuorum, comes here too). Throws
  // InputError for options that cannot hold.
  void hostQuorum(int workers, int64_t first_step, const QuorumOptions& options);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A connection to the coordinator. Every call is bounded by `timeout`
// (wait(keys, timeout) by its own argument); when the coordinator
// does not answer, calls throw PeerError naming it and `host`, the process
// serving it ("coordinator (worker 0) at host:port"). Not thread-safe: use
// one client per thread.
class CoordinatorClient final : public KeyValueStore {
 public:
  CoordinatorClient(HostPort coordinator, std::chrono::milliseconds timeout, const net::JobSecurity& security,
                    const std::string& host = "worker 0");
  ~CoordinatorClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key exists or the timeout passes (PeerError naming key).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::chrono::milliseconds timeout() const override;

  // Non-blocking: the value if present now.
  std::optional<std::vector<char>> tryGet(const std::string& key);

  // As set(), but bounded by `deadline` instead of the client's timeout.
  void set(const std::string& key, const std::vector<char>& data, Deadline deadline);
  // The subset of `keys` not in the store yet, in order; one round trip
  // bounded by `deadline` (PeerError naming the coordinator if it passes).
  std::vector<std::string> missingKeys(const std::vector<std::string>& keys, Deadline deadline);

  // The quorum (CoordinatorServer::hostQuorum): a heartbeat, an arrival at
  // a step boundary, a clean departure. Each answers with where the
  // membership stands, within `deadline` (PeerError naming the coordinator).
  QuorumView quorumBeat(int worker, Deadline deadline);
  QuorumView quorumArrive(int worker, int64_t generation, int64_t step, Deadline deadline);
  QuorumView quorumLeave(int worker, Deadline deadline);

  // "coordinator (worker 0) at host:port": how errors name the coordinator.
  const std::string& coordinatorName() const;

  // Asks the coordinator to host the job's quorum (CoordinatorServer::
  // hostQuorum), the chief's call when the job starts. A quorum it hosts
  // already stays as it is: a chief that started again joins, it does not
  // reset the membership. Answers where the membership stands.
  QuorumView hostQuorum(int workers, int64_t first_step, const QuorumOptions& options, Deadline deadline);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cluster
