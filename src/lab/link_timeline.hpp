#pragma once
// The lab's link counters as counter tracks on the job's timeline: each
// host's link rate, sent and received, in emulated Mbit/s, on the tasks'
// clock, so that a step's phases line up with what its link was doing
// (idle while a forward waits, say).
#include <nlohmann/json.hpp>

#include <vector>

#include "lab/link_sampler.hpp"

namespace tandem::lab {

// The timeline process that holds the tracks (workers are 0.., servers 1000..).
constexpr int kLinkTimelinePid = 2000;

// Chrome-trace events: the process's name and, for each host and each
// interval between two samples, a counter event "host H link" at the
// interval's start whose args {"sent", "received"} are the mean rates over
// it in Mbit/s of the emulated link (the real rate times `dilation`), and a
// last one of zero where the samples end.
nlohmann::json linkCounterEvents(const std::vector<CounterSample>& samples, double dilation);

}  // namespace tandem::lab
