#include "train/ps_pull_landing.hpp"

#include "core/clock.hpp"
#include "core/wire_dtype.hpp"
#include "ps/worker.hpp"
#include "train/ps_host_group.hpp"
#include "train/ps_setup.hpp"

namespace tandem::train {

PsPullLanding::PsPullLanding(PsConnection& link) : link_(link) {
  if (link_.host) pulled_.assign(static_cast<size_t>(link_.layout.total_floats), 0.0f);
}

double PsPullLanding::receiveDirect(Deadline deadline, int64_t pulled_for, size_t end) {
  double copying = 0;
  link_.worker->receivePulls(
      deadline, pulled_for,
      [&](size_t c, const ps::PulledValues& v) {
        Stopwatch copy;
        link_.model.scatter(c, v.data, v.wire);
        copying += copy.elapsed();
      },
      end);
  return copying;
}

double PsPullLanding::receive(Deadline deadline, int64_t pulled_for, size_t end) {
  if (!link_.host) {
    received_upto_ = end;
    return receiveDirect(deadline, pulled_for, end);
  }
  const size_t from = received_upto_;
  received_upto_ = link_.host->shareEnd(end);
  const ps::KeyLayout& layout = link_.layout;
  link_.worker->receivePulls(
      deadline, pulled_for,
      [&](size_t c, const ps::PulledValues& v) {
        decodeWire(v.wire, v.data, pulled_.data() + layout.chunks[c].begin, v.count);
      },
      received_upto_);
  link_.host->share(pulled_.data(), from, received_upto_, deadline);
  Stopwatch copy;
  for (size_t c = from; c < received_upto_; ++c) {
    link_.model.scatter(c, pulled_.data() + layout.chunks[c].begin, WireDtype::kFloat32);
  }
  return copy.elapsed();
}

ps::StepAgreement PsPullLanding::receiveFinalModel(int64_t step, Deadline deadline) {
  const ps::StepAgreement agreement = link_.worker->awaitWorkers(step, deadline);
  // Pulls answer once every push received before them is applied.
  link_.worker->pullAll(0);
  receiveDirect(deadline, step, SIZE_MAX);
  return agreement;
}

}  // namespace tandem::train
