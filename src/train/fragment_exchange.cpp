#include "train/fragment_exchange.hpp"

#include <numeric>

#include "core/clock.hpp"
#include "ps/worker.hpp"
#include "train/chunked_parameters.hpp"

namespace tandem::train {

std::function<int64_t(size_t)> FragmentExchange::chunkClocks(const FragmentSchedule& schedule, int64_t start_step) {
  return [schedule, start_step](size_t c) {
    return FragmentClocks::chunkAt(schedule, schedule.fragmentOf(c), start_step);
  };
}

FragmentExchange::FragmentExchange(const FragmentSchedule& schedule, double mix, PsConnection& link, int workers,
                                   const PushFormat& format, int64_t start_step)
    : schedule_(schedule),
      mix_(mix),
      format_(format),
      link_(link),
      workers_(workers),
      worker_(*link.worker),
      model_(link.model) {
  const ps::KeyLayout& layout = worker_.layout();
  global_.resize(static_cast<size_t>(layout.total_floats));
  outer_.resize(global_.size());
  for (size_t c = 0; c < layout.chunks.size(); ++c) gatherLocal(c, global_.data() + layout.chunks[c].begin);
  for (int p = 0; p < schedule_.fragments(); ++p) clock_.push_back(FragmentClocks::chunkAt(schedule_, p, start_step));
  reports_ = FragmentClocks::reportsAt(schedule_, start_step);
}

FragmentExchange::Outcome FragmentExchange::afterStep(int64_t step, bool last, const ps::StepReport& report) {
  Outcome out;
  if (in_flight_ && (in_flight_->merge_after == step || last)) out.agreement = merge(out.times);
  if (last || (out.agreement && out.agreement->stop)) {
    std::vector<int> all(static_cast<size_t>(schedule_.fragments()));
    std::iota(all.begin(), all.end(), 0);
    begin(all, step, /*mix=*/0.0, report);  // every worker ends on the global model
    out.agreement = merge(out.times);
    out.everything = out.reported = true;
    return out;
  }
  if (const std::optional<int> p = schedule_.startingAfter(step)) {
    begin({*p}, step + schedule_.delay(), mix_, report);
    out.reported = true;
    if (schedule_.delay() == 0) out.agreement = merge(out.times);
  }
  return out;
}

void FragmentExchange::begin(const std::vector<int>& fragments, int64_t merge_after, double mix,
                             const ps::StepReport& report) {
  const ps::KeyLayout& layout = worker_.layout();
  InFlight flight;
  flight.fragments = fragments;
  flight.merge_after = merge_after;
  flight.mix = mix;
  const float share = 1.0f / static_cast<float>(workers_);
  for (int p : fragments) {
    for (size_t c : schedule_.chunksOf(p, layout.chunks.size())) {
      const ps::Chunk& at = layout.chunks[c];
      float* outer = outer_.data() + at.begin;
      const float* global = global_.data() + at.begin;
      gatherLocal(c, outer);
      // Each worker's share of the mean, as the sync servers sum them.
      for (int64_t i = 0; i < at.length; ++i) outer[i] = (global[i] - outer[i]) * share;
      // Zero-copy: outer_ stays as it is until merge() has awaited the push.
      worker_.push(c, outer, clock_[static_cast<size_t>(p)]);
      pushed_bytes_ += static_cast<int64_t>(format_.bytes(static_cast<size_t>(at.length)));
      pulled_bytes_ += at.length * static_cast<int64_t>(wireBytes(format_.wire));
      flight.chunks.push_back(c);
    }
  }
  flight.finished = reports_ + 1;
  flight.report = worker_.sendReport(flight.finished, report);
  in_flight_ = std::move(flight);
}

ps::StepAgreement FragmentExchange::merge(SyncTimes& times) {
  const ps::KeyLayout& layout = worker_.layout();
  const Deadline deadline = link_.peerDeadline();
  InFlight flight = std::move(*in_flight_);
  in_flight_.reset();
  Stopwatch watch;
  double mixing = 0;
  const int64_t clock = clock_[static_cast<size_t>(flight.fragments.front())];
  worker_.awaitPushes(deadline, clock);
  std::vector<float> local;
  worker_.receivePulls(deadline, clock, [&](size_t c, const ps::PulledValues& values) {
    Stopwatch mix_watch;
    const ps::Chunk& at = layout.chunks[c];
    float* global = global_.data() + at.begin;
    decodeWire(values.wire, values.data, global, values.count);
    if (flight.mix == 0) {
      model_.scatter(c, global, WireDtype::kFloat32);
    } else {
      local.resize(static_cast<size_t>(at.length));
      gatherLocal(c, local.data());
      const auto m = static_cast<float>(flight.mix);
      for (int64_t i = 0; i < at.length; ++i) local[i] = m * local[i] + (1 - m) * global[i];
      model_.scatter(c, local.data(), WireDtype::kFloat32);
    }
    mixing += mix_watch.elapsed();
  });
  for (int p : flight.fragments) ++clock_[static_cast<size_t>(p)];
  const ps::StepAgreement agreement = worker_.awaitReport(flight.report, flight.finished, deadline);
  reports_ = flight.finished;
  ++exchanges_;
  times.update += mixing;
  times.exposed_comm += std::max(0.0, watch.elapsed() - mixing);
  return agreement;
}

void FragmentExchange::gatherLocal(size_t c, float* out) const {
  for (const auto& piece : model_.pieces(c)) {
    const torch::Tensor values = model_.trained()[piece.param].detach().view(-1).narrow(0, piece.param_offset, piece.count);
    torch::from_blob(out + piece.chunk_offset, {piece.count}, torch::kFloat32).copy_(values);
  }
}

}  // namespace tandem::train
