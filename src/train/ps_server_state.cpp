#include "train/ps_server_state.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ps/worker.hpp"
#include "train/optimizer_state.hpp"
#include "train/ps_setup.hpp"

namespace tandem::train {

std::optional<int64_t> fetchServerState(PsConnection& link, const ServerStateFetch& fetch,
                                        torch::optim::Optimizer& optimizer) {
  ps::Worker& worker = *link.worker;
  std::optional<ps::SnapshotPoint> point;
  if (fetch.pause_others) point = worker.holdForSnapshot(link.peerDeadline());
  const int slots = optim::slotCount(*fetch.optimizer);
  const std::vector<ps::FetchedState> chunks =
      worker.fetchState(fetch.mode == Mode::PsSync && !fetch.streaming ? fetch.step : 0, slots, link.peerDeadline(),
                        point ? &*point : nullptr);
  if (point) worker.releaseSnapshot(link.peerDeadline());
  ChunkedParameters& model = link.model;
  // Torch tensors for every parameter's slots, filled chunk by chunk.
  std::vector<std::vector<torch::Tensor>> state(model.params().size());
  std::vector<int64_t> applied(model.params().size(), 0);
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (int k = 0; k < slots; ++k) state[p].push_back(torch::zeros_like(model.params()[p]));
  }
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ps::FetchedState& chunk = chunks[c];
    // The worker computes with the wire's rounding of the servers' float32
    // values (streaming DiLoCo: with its own); the checkpoint keeps the servers'. A
    // snapshot's values replace this worker's last pull too, so the checkpoint is all of one step.
    if (fetch.wire != WireDtype::kFloat32 || point || fetch.streaming) {
      model.scatter(c, chunk.values().data(), WireDtype::kFloat32);
    }
    for (const auto& piece : model.pieces(c)) {
      applied[piece.param] = std::max<int64_t>(applied[piece.param], chunk.clock);
      for (int k = 0; k < slots; ++k) {
        std::memcpy(state[piece.param][static_cast<size_t>(k)].data_ptr<float>() + piece.param_offset,
                    chunk.slot(k).data() + piece.chunk_offset, static_cast<size_t>(piece.count) * sizeof(float));
      }
    }
  }
  const std::optional<int64_t> step =
      point && fetch.mode == Mode::PsAsync ? std::optional<int64_t>(point->global_step) : std::nullopt;
  if (slots == 0) return step;
  for (size_t p = 0; p < model.params().size(); ++p) {
    if (applied[p] == 0) continue;  // torch has no state before a parameter's first update
    writeKernelState(optimizer, model.trained()[p], *fetch.optimizer, {std::move(state[p]), applied[p]});
  }
  return step;
}

}  // namespace tandem::train
