// Horovod's process sets (include/tandem/collectives.hpp): adding and
// removing them, each a collective of the whole job on its communication
// thread, and finding the group a collective runs in.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "api/job.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "tandem/tandem.hpp"

namespace tandem {
namespace api {

std::optional<int> Group::rankOf(int global) const {
  const auto it = std::find(members.begin(), members.end(), global);
  if (it == members.end()) return std::nullopt;
  return static_cast<int>(it - members.begin());
}

Group wholeJob(Job& job) {
  Group g;
  g.rank = job.rank();
  g.size = job.size();
  g.comm = job.comm.get();
  g.thread = job.comm_thread.get();
  for (int r = 0; r < g.size; ++r) g.members.push_back(r);
  return g;
}

Group groupOf(Job& job, int id, const std::string& call) {
  if (id == 0) return wholeJob(job);
  const auto it = job.process_sets.find(id);
  if (it == job.process_sets.end()) {
    std::vector<int> ids = {0};
    for (const auto& entry : job.process_sets) ids.push_back(entry.first);
    throw InputError(fmt::format("{}: process set {} does not exist (add_process_set makes one; sets now: {})", call,
                                 id, fmt::join(ids, ", ")));
  }
  const ProcessSet& set = it->second;
  if (set.rank < 0) {
    throw InputError(fmt::format("{}: rank {} is not a member of process set {} (ranks {})", call, job.rank(), id,
                                 fmt::join(set.ranks, ", ")));
  }
  Group g;
  g.id = id;
  g.rank = set.rank;
  g.size = static_cast<int>(set.ranks.size());
  g.comm = set.comm.get();
  g.thread = set.comm_thread.get();
  g.members = set.ranks;
  return g;
}

namespace {

// Every rank of the job makes the same change, agreed first on the job's
// communication thread, so that the sets and their ids stay alike.
void agreeOnChange(Job& job, const Announcement& mine, const std::string& what) {
  if (!job.comm_thread) return;
  job.runNow([&] {
    const Agreement agreement = negotiate(wholeJob(job), mine);
    if (!agreement.error.empty()) throw MismatchError("tandem: " + agreement.error);
  }, what);
}

}  // namespace
}  // namespace api

int add_process_set(std::vector<int> ranks) {
  api::Job& job = api::requireJob("add_process_set");
  std::sort(ranks.begin(), ranks.end());
  const int size = job.size();
  if (ranks.empty()) throw InputError("add_process_set: no ranks");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size) {
      throw InputError(fmt::format("add_process_set: rank {} is outside the job's ranks 0..{}", ranks[i], size - 1));
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) throw InputError(fmt::format("add_process_set: rank {} twice", ranks[i]));
  }
  if (job.live) {
    throw InputError("add_process_set: not in an elastic job, whose ranks change (Horovod's elastic drops its "
                     "process sets at each reset)");
  }
  if (static_cast<int>(ranks.size()) == size) {
    throw InputError(fmt::format("add_process_set: ranks {} are every rank, the global process set (0)",
                                 fmt::join(ranks, ", ")));
  }
  for (const auto& [id, set] : job.process_sets) {
    if (set.ranks == ranks) {
      throw InputError(fmt::format("add_process_set: process set {} already has ranks {}", id, fmt::join(ranks, ", ")));
    }
  }
  Fnv1a hash;
  for (int r : ranks) hash.addValue(r);
  api::Announcement mine;
  mine.kind = api::CallKind::kProcessSets;
  mine.op = 0;
  mine.count = static_cast<int64_t>(ranks.size());
  mine.signature = hash.value();
  api::agreeOnChange(job, mine, "add_process_set");

  int id = job.next_set_id;
  if (!job.free_set_ids.empty()) {
    id = job.free_set_ids.front();
    job.free_set_ids.pop_front();
  } else {
    ++job.next_set_id;
  }
  api::ProcessSet set;
  set.ranks = ranks;
  const auto mine_at = std::find(ranks.begin(), ranks.end(), job.rank());
  const int64_t serial = job.sets_made++;
  if (mine_at != ranks.end()) {
    set.rank = static_cast<int>(mine_at - ranks.begin());
    if (job.join.store) {
      collective::CommunicatorOptions options = job.comm_options;
      options.rank = set.rank;
      options.size = static_cast<int>(ranks.size());
      set.store = std::make_unique<cluster::PrefixStore>(fmt::format("set{}", serial), *job.join.store);
      set.comm = collective::Communicator::connect(*set.store, options);  // the members only
      set.comm_thread = std::make_unique<collective::CommThread>();
    }
  }
  job.process_sets.emplace(id, std::move(set));
  return id;
}

bool remove_process_set(int id) {
  api::Job& job = api::requireJob("remove_process_set");
  if (id == 0 || !job.process_sets.contains(id)) return false;
  api::Announcement mine;
  mine.kind = api::CallKind::kProcessSets;
  mine.op = 1;
  mine.count = id;
  mine.signature = static_cast<uint64_t>(id);
  api::agreeOnChange(job, mine, "remove_process_set");
  // Its thread finishes what is queued, then its communicator closes.
  job.process_sets.erase(id);
  job.free_set_ids.push_back(id);
  return true;
}

std::map<int, std::vector<int>> process_sets() {
  api::Job& job = api::requireJob("process_sets");
  std::map<int, std::vector<int>> out;
  out[0] = api::wholeJob(job).members;
  for (const auto& [id, set] : job.process_sets) out[id] = set.ranks;
  return out;
}

}  // namespace tandem
