#pragma once
// A primary's side of async and SSP replication (--ps-replicas 2): the
// server that backs up its chunks, and the acknowledgements that wait both
// for the apply here and for the backup's answer to the push's forward.
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
  struct Successor {
    std::string endpoint;
    std::string name;  // "ps 1"
  };

  // An init: forward to `successor` (none: this server forwards nothing),
  // forgetting what a previous start held (its pushers are gone).
  void reset(std::optional<Successor> successor);
  // Where forwards go; null without one, or once it is lost.
  const Successor* successor() const { return lost_ || !successor_ ? nullptr : &*successor_; }

  // A push forwarded as `ack.forward` (the returned id): its acknowledgement
  // waits for both sides.
  HeldAck hold(HeldAck ack);
  // Its apply here ended: the acknowledgement, once the backup answered too.
  std::optional<HeldAck> applied(uint64_t id);

  // The backup's answer to forward `id`.
  struct Outcome {
    std::vector<HeldAck> acknowledged;  // applied on both, or here with the backup gone
    std::optional<HeldAck> refused;     // the backup refused the forward: its pusher is told why
    bool newly_lost = false;            // the backup was lost just now: say so once
  };
  // `lost`: the backup is gone; every held push counts as answered, and
  // nothing more is forwarded. Otherwise `failure` non-empty: it refused it.
  Outcome answered(uint64_t id, const std::string& failure, bool lost);

 private:
  struct Pending {
    HeldAck ack;
    bool applied = false;   // here
    bool answered = false;  // by the backup (or it is lost)
  };
  using Map = std::unordered_map<uint64_t, Pending>;
  // The acknowledgement once both sides are done, erasing it; else none.
  std::optional<HeldAck> settle(Map::iterator it);

  std::optional<Successor> successor_;
  bool lost_ = false;
  uint64_t next_id_ = 1;
  Map pending_;
};

}  // namespace tandem::ps
