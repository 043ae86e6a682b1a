#pragma once
// The process's membership in a job, behind the public API's free
// functions: cluster spec, rendezvous, the communicator and its thread.
#include "cluster/kv_store.hpp"

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "api/negotiation.hpp"
#include "cluster/cluster_spec.hpp"
#include "collective/comm_thread.hpp"
#include "collective/communicator.hpp"
#include "core/deadline.hpp"
#include "obs/timeline.hpp"
#include "tandem/tandem.hpp"
#include "train/cluster_join.hpp"
#include "train/live_membership.hpp"

namespace tandem::api {

// A process set (Horovod's): collectives among some of the job's ranks,
// over a communicator and a thread of their own.
struct ProcessSet {
  std::vector<int> ranks;  // the job's ranks, ascending
  int rank = -1;           // this process's rank among them; -1: not a member
  std::unique_ptr<cluster::PrefixStore> store;
  std::unique_ptr<collective::Communicator> comm;  // members only
  // Declared after comm: destroyed first, so queued jobs never outlive it.
  std::unique_ptr<collective::CommThread> comm_thread;
};

// Where a collective runs: the job's ranks (set 0) or a process set's.
struct Group {
  int id = 0;
  int rank = 0;
  int size = 1;
  collective::Communicator* comm = nullptr;  // null: alone, every collective an identity
  collective::CommThread* thread = nullptr;  // null: calls run inline
  std::vector<int> members;                  // the job's ranks, by rank in the group
  // The group's rank of the job's rank `global`, if it is a member.
  std::optional<int> rankOf(int global) const;
};

struct Job {
  InitOptions options;
  std::optional<cluster::ClusterSpec> spec;  // nullopt: alone
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;  // among the ranks with this local_rank
  int cross_size = 1;
  train::ClusterJoin join;
  std::unique_ptr<cluster::PrefixStore> gloo_store;
  std::unique_ptr<collective::Communicator> comm;
  // Declared after comm: destroyed first, so queued jobs never outlive it.
  // Every collective runs here, in submission order, so the optimizer's
  // buckets and the user's own calls never race on the communicator.
  std::unique_ptr<collective::CommThread> comm_thread;

  // What a rank in join() runs for a GradientAverager's step, by the
  // averager's signature: its buckets' sums with zeros.
  std::mutex servers_mutex;
  std::map<uint64_t, std::function<void()>> zero_gradients;
  // Each averager's, by the same signature: drops the step a failed
  // collective cut short, so that the next one starts clean (elastic reset).
  std::map<uint64_t, std::function<void()>> abandon_step;

  // An elastic job's (TANDEM_MIN_WORKERS): the members of the moment.
  std::unique_ptr<train::LiveMembership> live;
  int sync_root = 0;    // the rank with the newest state after the last reset
  int64_t commits = 0;  // elastic_hosts_updated() calls: hvd.elastic's commits, its steps
  collective::CommunicatorOptions comm_options;  // as connected, for the next generation's
  // Bumped by each connect of an elastic job: what holds the communicator follows it.
  uint64_t generation = 0;

  // hvd.start_timeline: a trace of every collective, on rank 0 only, as
  // Horovod writes its timeline on the coordinator. Null while none records.
  std::mutex timeline_mutex;
  std::shared_ptr<obs::Timeline> timeline;

  // add_process_set's, by id (> 0). Declared after join: their stores are its.
  std::map<int, ProcessSet> process_sets;
  std::deque<int> free_set_ids;  // removed, for reuse oldest first (as Horovod's)
  int next_set_id = 1;
  int64_t sets_made = 0;  // names each set's keys in the store, as ids come back

  int size() const { return live ? live->size() : spec ? spec->num_workers : 1; }
  int rank() const { return live ? live->rank() : spec ? spec->index : 0; }
  Deadline deadline() const { return Deadline::afterSeconds(options.peer_timeout_s + 5.0); }
  void runNow(std::function<void()> work, const std::string& what) {
    comm_thread->submit(std::move(work)).wait(deadline(), what);
  }
};

// `body` as the communication thread runs it, recorded on the job's
// timeline while one records: a span named by `name` when it ran, after
// one for its wait in the queue since this call. `name` is called only
// then, so that untraced steps format nothing.
std::function<void()> traced(Job& job, const std::function<std::string()>& name, std::function<void()> body);

// Writes the job's timeline, if one records, and stops it.
void stopTimeline(Job& job);

// The job init() made; null before init() and after shutdown().
std::unique_ptr<Job>& current();
// The API's context: one per process, built on first use, because a task's
// starts outlive its init()s (an init() after shutdown() must wait for the
// job's next start, not rejoin the one it left). init() and fit() pass it
// down; nothing below them reads it.
cluster::JobContext& processContext();
// Runs on the group's communication thread, before a collective: every
// rank's announcement is exchanged and agree()d. Ranks in join() are then
// serving this call.
Agreement negotiate(const Group& group, const Announcement& mine);
// The job's ranks as a group (set 0).
Group wholeJob(Job& job);
// Process set `id` as a group, for `call`: InputError naming the set when
// there is none or this rank is not a member.
Group groupOf(Job& job, int id, const std::string& call);

// An elastic job's (api/elastic.cpp): how few workers may go on, from
// TANDEM_MIN_WORKERS (tandem launch --min-workers N sets it for a
// program); 0: not elastic. Throws InputError naming the variable.
int elasticMinWorkers(const Environment& env);
// The store's address when another process serves it (tandem launch sets
// TANDEM_COORDINATOR for an elastic program), and how many workers the job
// may grow to (TANDEM_MAX_WORKERS, from launch --max-workers), and how
// many of a launcher's last tasks serve (TANDEM_PS_TASKS, from launch
// --hosts with --ps); empty flags otherwise. Throws InputError naming a variable that holds no count.
cluster::ClusterFlags launchedClusterFlags(const Environment& env);
// A communicator among generation `m`'s members, on the comm thread.
void connectGeneration(Job& job, const cluster::Membership& m);

// current(), or an Error naming `call` that asks for init() first.
Job& requireJob(const char* call);
// Compares `mine` (a hash of what this rank is about to exchange) across
// the group's ranks (it has peers); throws InputError naming the ranks
// that differ from its first and `what` differs, before a collective could
// pair mismatched buffers.
void requireAgreement(Job& job, const Group& group, uint64_t mine, const std::string& what);

}  // namespace tandem::api
