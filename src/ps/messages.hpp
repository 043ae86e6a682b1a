#pragma once
// The parameter server's messages over net frames (types 32-63), and the
// catalog its servers and clients validate frames against. A request's key
// range is its chunk keys; its clock is the sender's step. The payloads'
// encodings are in ps/protocol.hpp.
#include "net/frame.hpp"

namespace tandem::ps {

namespace msg {
using net::MessageType;
inline constexpr MessageType kHello{32};  // payload: [u32 worker][u64 layout fingerprint]; every worker's first
inline constexpr MessageType kInit{33};   // chief only; payload: JSON server config (ps/protocol.hpp)
// Chief only; one chunk's initial floats, optionally followed by its
// optimizer slots (resume); clock = updates the chunk already had.
inline constexpr MessageType kSet{34};
inline constexpr MessageType kPush{35};  // one chunk's gradient for step `clock`, pre-scaled by the worker
// One chunk; reply kValues once the chunk has `clock` updates (sync) or has
// applied every push received before the pull (async).
inline constexpr MessageType kPull{36};
inline constexpr MessageType kValues{37};  // reply to pull: the chunk's floats
inline constexpr MessageType kClock{38};   // "finished step `clock`"; payload: StepReport; reply kAgreement
inline constexpr MessageType kDone{39};    // a worker leaves; no more requests from it
// Like a pull, but the reply carries [param][optimizer slots] (checkpoints);
// async and SSP may carry a snapshot point: answered once every worker's
// pushes up to its clock there are applied.
inline constexpr MessageType kState{40};
// Reply to kClock; payload: StepAgreement. No request is answered with its
// own type, so a socket that reads back what it sent (connected to itself)
// is told apart from a real answer.
inline constexpr MessageType kAgreement{41};
// The chief's last request before its final checkpoint: reply kAgreement
// once every other worker is done or lost.
inline constexpr MessageType kAwaitWorkers{42};
// A worker's learning rate from now on (payload: f64), read from its own
// optimizer each step (the Python and C++ APIs): its later pushes apply
// with it (sync: worker 0's) instead of the init's table.
inline constexpr MessageType kLr{43};
// The chief, before an async or SSP checkpoint: ps 0 holds every other
// worker's next step report; reply kOk with a SnapshotPoint once all of them
// wait (or are done or lost). kRelease (or the chief's next report, goodbye
// or loss) lets them go on.
inline constexpr MessageType kHold{44};
inline constexpr MessageType kRelease{45};
// A sync worker leaves this start to begin again in place (--restart-wait):
// steps and pulls that wait for it fail at once instead of after
// --peer-timeout, so the other workers start again too.
inline constexpr MessageType kLeave{46};
// A worker that computes for a while without a request (DiLoCo's local
// steps) says it is alive, so that its silence is not taken for death; reply kOk.
inline constexpr MessageType kAlive{47};
// Anyone, before or after the init: reply kOk with a ServerStatus. The chief
// asks a lost server's address whether a replacement waits there, fresh.
inline constexpr MessageType kStatus{48};
// A server to the backup of its chunk (async and SSP, --ps-replicas 2): a
// push it applied, in the order it applied them; payload: ForwardHead and
// the gradient as pushed. Reply kOk once applied there too.
inline constexpr MessageType kForward{49};
// The chief to a live holder of chunks whose other holder's replacement it
// found (async and SSP, --ps-replicas 2): payload JSON ReplicaRequest. The
// holder copies each chunk there (ps-copy) and forwards its later pushes.
inline constexpr MessageType kReplicate{50};
// A holder to a replacement: one chunk's state as of its last apply;
// payload: CopyHead, then the values and optimizer slots (float32).
inline constexpr MessageType kCopy{51};
// A holder to a replacement it copies to: where each worker stands (step
// clocks, rates); payload JSON WorkerMirror. Sent again after every change.
inline constexpr MessageType kMirror{52};
}  // namespace msg

inline constexpr net::MessageName kMessageNames[] = {
    {msg::kHello, "ps-hello"},
    {msg::kInit, "ps-init"},
    {msg::kSet, "ps-set"},
    {msg::kPush, "ps-push"},
    {msg::kPull, "ps-pull"},
    {msg::kValues, "ps-values"},
    {msg::kClock, "ps-clock"},
    {msg::kDone, "ps-done"},
    {msg::kState, "ps-state"},
    {msg::kAgreement, "ps-agreement"},
    {msg::kAwaitWorkers, "ps-await-workers"},
    {msg::kLr, "ps-lr"},
    {msg::kHold, "ps-hold"},
    {msg::kRelease, "ps-release"},
    {msg::kLeave, "ps-leave"},
    {msg::kAlive, "ps-alive"},
    {msg::kStatus, "ps-status"},
    {msg::kForward, "ps-forward"},
    {msg::kReplicate, "ps-replicate"},
    {msg::kCopy, "ps-copy"},
    {msg::kMirror, "ps-mirror"},
};
inline constexpr net::MessageCatalog kMessages{kMessageNames};

}  // namespace tandem::ps
