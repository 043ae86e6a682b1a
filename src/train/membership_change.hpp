#pragma once
// What the trainer learns when a live all-reduce job's members change
// (train/live_membership.hpp): a value handed up through AgreedStep.
#include <cstddef>
#include <cstdint>
#include <functional>
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
  bool healing = false;  // someone is behind `step`: trainer state follows through broadcast()
  bool is_source = false;  // this worker is the one the others copy from
  std::vector<cluster::Departure> departed;
  std::vector<int> joined;
  int source = -1;             // the worker whose state the others copy; -1: nobody is behind
  std::vector<int> behind;     // the workers that copy it
  // From the source to every member, each calling it in the same order;
  // only while handling this change, and only when `healing`.
  std::function<void(void* data, size_t bytes)> broadcast;
};

}  // namespace tandem::train
