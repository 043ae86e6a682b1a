#pragma once
// Samples the lab's link counters every few milliseconds on a thread of its
// own, so that the bytes of any time window (a worker's steady steps) can be
// read afterwards on the same clock as the workers' metrics.
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "lab/virtual_network.hpp"

namespace tandem::lab {

struct CounterSample {
  double time = 0;  // unix seconds
  std::vector<LinkCounters> links;
};

// Thread-safe.
class LinkSampler {
 public:
  using Read = std::function<std::vector<LinkCounters>()>;
  LinkSampler(Read read, double interval_s = 0.01);
  ~LinkSampler();  // stops the thread
  void stop();
  // Each link's counters at `time`, interpolated between the samples around
  // it (clamped to the first and last). Throws Error before any sample.
  std::vector<LinkCounters> at(double time) const;
  std::vector<CounterSample> samples() const;  // in time order

 private:
  void run();
  Read read_;
  double interval_s_;
  mutable std::mutex mutex_;
  std::vector<CounterSample> samples_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::lab
