#include "lab/link_sampler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"

namespace tandem::lab {
namespace {

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

LinkSampler::LinkSampler(Read read, double interval_s) : read_(std::move(read)), interval_s_(interval_s) {
  samples_.push_back({unixNow(), read_()});
  thread_ = std::thread([this] { run(); });
}

LinkSampler::~LinkSampler() { stop(); }

void LinkSampler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LinkSampler::run() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s_));
    CounterSample s{unixNow(), {}};
    try {
      s.links = read_();
    } catch (const std::exception&) {
      return;  // the network is gone: the samples so far stay readable
    }
    std::lock_guard lock(mutex_);
    samples_.push_back(std::move(s));
    if (stopping_) return;
  }
}

std::vector<LinkCounters> LinkSampler::at(double time) const {
  std::lock_guard lock(mutex_);
  if (samples_.empty()) throw Error("no link counter sample was taken");
  auto after = std::lower_bound(samples_.begin(), samples_.end(), time,
                                [](const CounterSample& s, double t) { return s.time < t; });
  if (after == samples_.begin()) return samples_.front().links;
  if (after == samples_.end()) return samples_.back().links;
  const CounterSample& b = *after;
  const CounterSample& a = *(after - 1);
  const double f = b.time > a.time ? (time - a.time) / (b.time - a.time) : 1.0;
  std::vector<LinkCounters> out(a.links.size());
  auto mix = [f](uint64_t x, uint64_t y) {
    return static_cast<uint64_t>(std::llround(static_cast<double>(x) + f * (static_cast<double>(y) - static_cast<double>(x))));
  };
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = {mix(a.links[i].sent_bytes, b.links[i].sent_bytes), mix(a.links[i].received_bytes, b.links[i].received_bytes)};
  }
  return out;
}

std::vector<CounterSample> LinkSampler::samples() const {
  std::lock_guard lock(mutex_);
  return samples_;
}

}  // namespace tandem::lab
