#pragma once
// What `tandem launch` does when one of its tasks exits: go on without it,
// start it again alone into the running job, or stop the job (and, with a
// restart left, start every task again from the newest checkpoint). Pure:
// it takes the exit and the restarts so far, so a test replays any
// sequence of deaths without a process. Torch-free.
#include <string>

#include "launch/process_group.hpp"

namespace tandem::launch {

// The job's kind, as far as a failure is concerned.
struct JobKind {
  // All-reduce with a live membership (train's --min-workers, or an
  // elastic program): its members may change, worker 0 included.
  bool live = false;
  // Parameter-server jobs whose failed workers are started again alone:
  // async and SSP (DiLoCo's too) continue their predecessor's clock, sync
  // joins at a step boundary.
  bool elastic_ps = false;
  // Worker 0 comes back as the chief: every PS mode but DiLoCo, whose
  // chief holds the outer optimizer's state.
  bool chief_comes_back = false;
  // --ps-replicas 2: a dead server's chunks go on at their other holder.
  bool replicated = false;
  // A replicated server is started again and taken back (not DiLoCo's).
  bool servers_come_back = false;
  // --on-worker-failure continue (or its default): a spared worker that
  // dies and is not replaced does not stop the job.
  bool carry_on = false;
  int max_restarts = 0;
};

class FailurePolicy {
 public:
  explicit FailurePolicy(JobKind kind) : kind_(kind) {}
  const JobKind& kind() const { return kind_; }

  // Exited on its own account: a signal, or a status other than 0 and 130
  // (how a task says it stopped on a forwarded signal and saved its state).
  static bool failed(const ChildExit& e) { return e.signaled || (e.exit_code != 0 && e.exit_code != 130); }
  // Exited 2: bad input, which a new process would only repeat.
  static bool badInput(const ChildExit& e) { return !e.signaled && e.exit_code == 2; }
  static bool isServer(const ChildExit& e) { return e.name.rfind("ps ", 0) == 0; }
  static bool isWorker(const ChildExit& e) { return e.name.rfind("worker ", 0) == 0; }

  // A worker the job can do without for now: any but worker 0, which the
  // job needs unless it is live or a restart is left to bring it back.
  bool spares(const ChildExit& e, int restarts) const;
  // Whether this exit stops every task. A second server lost may leave a
  // chunk with no replica: the workers then fail, naming it, and so does
  // the job.
  bool stopsJob(const ChildExit& e, int restarts) const;

  enum class Replacement { kNone, kWorker, kServer };
  // Whether to start the failed task again alone into the running job.
  // `ending`: a task finished or the job is stopping (no server comes back
  // then). `forwarded`: a stop signal was forwarded to the job.
  Replacement replaces(const ChildExit& e, int restarts, bool ending, bool forwarded) const;
  // Whether this exit ends the job: it would stop it, and is not started
  // again alone either (a sync worker with a restart left is, and the job
  // goes on: so a server lost after it still comes back).
  bool endsJob(const ChildExit& e, int restarts, bool ending, bool forwarded) const {
    return stopsJob(e, restarts) && replaces(e, restarts, ending, forwarded) == Replacement::kNone;
  }

 private:
  JobKind kind_;
};

}  // namespace tandem::launch
