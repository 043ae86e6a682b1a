#pragma once
// The servers' state, fetched for a checkpoint: every chunk's float32
// values and optimizer slots, put into torch's optimizer state so that the
// checkpoint resumes in any mode.
#include <torch/torch.h>

#include <cstdint>
#include <optional>

#include "tandem/mode.hpp"
#include "train/config.hpp"

namespace tandem::train {
struct PsConnection;

struct ServerStateFetch {
  Mode mode = Mode::PsSync;
  int64_t step = 0;  // this worker's clock: sync fetches the state after it
  // Async and SSP gradient steps: every other worker pauses at its next
  // step boundary, and each chunk is taken with exactly the pushes of the
  // steps before it. Otherwise (DiLoCo) each chunk is taken as it is.
  bool pause_others = false;
  bool streaming = false;  // chunks keep clocks of their own
  WireDtype wire = WireDtype::kFloat32;
  const OptimizerConfig* optimizer = nullptr;  // the servers' rule
};

// Fetches the servers' state into `optimizer` (the slots of the trained
// parameters, in registration order). The model takes the servers' float32
// values where the worker computes with other ones (a 16-bit wire, a
// paused job, streaming). Returns async's global step at the pause.
// Throws PeerError naming a server that does not answer in time.
std::optional<int64_t> fetchServerState(PsConnection& link, const ServerStateFetch& fetch,
                                        torch::optim::Optimizer& optimizer);

}  // namespace tandem::train
