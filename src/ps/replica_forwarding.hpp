#pragma once
// A holder's side of async and SSP replication (--ps-replicas 2): the
// servers its chunks' pushes go on to, and the acknowledgements that wait
// both for the apply here and for the other holder's answer to the push's
// forward. A destination is the successor named at init (the backup of
// this server's own chunks) or a replacement this server was asked to copy
// chunks to (ps-replicate), which also mirrors where the workers stand.
// Pure: it says which acknowledgements may go out; the request handler
// sends them. Single-threaded (the server's I/O thread).
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/chunk_state.hpp"

namespace tandem::ps {

class ReplicaForwarding {
 public:
  struct Destination {
    std::string endpoint;
    std::string name;       // "ps 1"
    bool lost = false;
    bool mirrored = false;  // a replacement: it gets the workers' record too
    uint64_t generation = 0;  // counts adds: a connection made before is stale
  };

  // An init: forward to `successor` (none: this server forwards nothing),
  // forgetting what a previous start held (its pushers are gone).
  void reset(std::optional<Destination> successor);
  // A replacement at `endpoint` to copy chunks to: its index (the same
  // index when it replaces a lost destination at that endpoint).
  int add(const std::string& endpoint, const std::string& name);
  // Destination `d`; null once it is lost.
  const Destination* destination(int d) const;
  // The replacements alive, which the workers' record is mirrored to.
  std::vector<int> mirrors() const;

  // A forward that nothing waits for (a copy, a mirror, an acknowledged push): its id.
  uint64_t untracked() { return next_id_++; }
  // A push forwarded to `to` as `ack.forward` (the returned id): its
  // acknowledgement waits for both sides.
  HeldAck hold(HeldAck ack, int to);
  // Its apply here ended: the acknowledgement, once the other holder answered too.
  std::optional<HeldAck> applied(uint64_t id);

  // The answer to forward `id`, sent to `to`.
  struct Outcome {
    std::vector<HeldAck> acknowledged;  // applied on both, or here with the other gone
    std::optional<HeldAck> refused;     // the destination refused the forward: its pusher is told why
    bool newly_lost = false;            // `to` was lost just now: say so once
  };
  // `lost`: `to` is gone; every push held for it counts as answered, and
  // nothing more goes there. Otherwise `failure` non-empty: it refused it.
  Outcome answered(uint64_t id, int to, const std::string& failure, bool lost);

 private:
  struct Pending {
    HeldAck ack;
    int to = 0;
    bool applied = false;   // here
    bool answered = false;  // by the destination (or it is lost)
  };
  using Map = std::unordered_map<uint64_t, Pending>;
  // The acknowledgement once both sides are done, erasing it; else none.
  std::optional<HeldAck> settle(Map::iterator it);

  std::vector<Destination> destinations_;
  uint64_t next_id_ = 1;
  uint64_t adds_ = 0;
  Map pending_;
};

}  // namespace tandem::ps
