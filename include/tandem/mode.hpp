#pragma once
// How a job trains: the one mode enum of every face (`tandem train`, the C++
// API, tandem.torch, summaries, the servers). Torch-free and std-only, so
// the lowest layers and the installed API share it; its names are in
// core/training_mode.hpp.

namespace tandem {

enum class Mode {
  Standalone,  // "standalone": one process, no exchange
  AllReduce,   // "allreduce": average gradients over the workers; every worker steps its optimizer
  PsSync,      // "ps-sync": parameter servers apply the mean of every worker's gradient, once per step
  PsAsync,     // "ps-async": parameter servers apply each worker's gradient as it arrives
  Ssp,         // "ps-ssp": like PsAsync, but no worker runs more than `staleness` steps ahead of the slowest
};

}  // namespace tandem
