#pragma once
// Where a parameter-server worker's pulls land: chunk by chunk in key
// order, first layers first, decoded from their wire into the model. With
// host sums the owners' pulls are shared among the host-mates first, in
// whole groups, so that every host-mate runs the same shares in the same
// order however its callers cut the model. The connection is the caller's
// and outlives it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/deadline.hpp"
#include "ps/protocol.hpp"

namespace tandem::train {
struct PsConnection;

class PsPullLanding {
 public:
  explicit PsPullLanding(PsConnection& link);

  // A step's pulls are on their way: none of them is in the model yet.
  void expect() { received_upto_ = 0; }
  // Chunks [0, end) of the last pulls are in the model.
  bool holds(size_t end) const { return end <= received_upto_; }
  // Copies the pulls answering step `pulled_for` from where the last call
  // stopped up to chunk `end` into the model; returns the seconds spent
  // copying. Throws PeerError naming a server that did not answer by
  // `deadline`.
  double receive(Deadline deadline, int64_t pulled_for, size_t end = SIZE_MAX);
  // Async and SSP: waits until ps 0 says every other worker is done or
  // lost, then pulls the whole model into this one.
  ps::StepAgreement receiveFinalModel(int64_t step, Deadline deadline);

 private:
  // Every pulled chunk before `end`, straight into the model.
  double receiveDirect(Deadline deadline, int64_t pulled_for, size_t end);

  PsConnection& link_;
  std::vector<float> pulled_;         // host sums: the model as pulled, in key order
  size_t received_upto_ = SIZE_MAX;  // the last pulls before this chunk are in the model
};

}  // namespace tandem::train
