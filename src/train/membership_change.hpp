#pragma once
// What the trainer learns when a live all-reduce job's members change
// (train/live_membership.hpp): a value handed up through AgreedStep.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cluster/quorum.hpp"

namespace tandem::train {

// A change of a live job's membership, decided at a step boundary.
struct MembershipChange {
  int64_t generation = 0;
  int rank = 0;
  int world = 1;
  int workers_before = 0;
  int64_t step = 0;     // the steps the job has done: every member goes on from here
  bool redo = false;    // this worker's step failed: it is done again by the new members
  bool is_source = false;  // this worker is the one the others copy from
  std::vector<cluster::Departure> departed;
  std::vector<int> joined;
  int source = -1;             // the worker whose state the others copy; -1: nobody is behind
  std::vector<int> behind;     // the workers that copy it
  // From the source to every member, each calling it in the same order;
  // only while handling this change, and only when healing().
  std::function<void(void* data, size_t bytes)> broadcast;

  // Someone is behind `step`: the trainer's state follows through broadcast().
  bool healing() const { return source >= 0; }
};

// The progress line of a change ("members: 3 -> 2 worker(s) at step 17
// (generation 1); lost: worker 2 (silent for 1.0s); ..."), `lr_text` last.
std::string describeChange(const MembershipChange& change, int workers_before, const std::string& lr_text);
// The change as a line of OUT/restarts.jsonl.
nlohmann::json changeRecord(const MembershipChange& change, int workers_before);

}  // namespace tandem::train
