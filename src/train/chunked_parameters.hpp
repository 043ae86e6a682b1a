#pragma once
// A model's trainable parameters seen as a parameter-server layout's
// chunks: which floats of which parameter each chunk holds, copies between
// chunks and parameters, and which chunks a forward needs first.
//
// A model on a GPU is staged: its parameters move into one device buffer in
// key order, params() are their host copies (page-locked), and each chunk
// scattered there goes on to the device at once, one copy per chunk, so the
// first layers' values arrive while later chunks are still being received.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "core/wire_dtype.hpp"
#include "optim/kernels.hpp"
#include "ps/key_layout.hpp"
#include "train/device_transfer.hpp"

namespace tandem::train {

class ChunkedParameters {
 public:
  // Where a chunk's floats live in one parameter.
  struct Piece {
    size_t param = 0;
    int64_t param_offset = 0, chunk_offset = 0, count = 0;
  };

  ChunkedParameters() = default;
  // `params`: contiguous float32 on one device, in the layout's key order.
  // Off the CPU they are staged through `transfer` (null: the CUDA copier).
  ChunkedParameters(std::vector<torch::Tensor> params, const ps::KeyLayout& layout,
                    std::shared_ptr<DeviceTransfer> transfer = nullptr);

  // Where the values are read and written: the parameters, or their host copies.
  const std::vector<torch::Tensor>& params() const { return params_; }
  // The model's own parameters (what an optimizer's state is keyed by).
  const std::vector<torch::Tensor>& trained() const { return trained_; }
  bool staged() const { return transfer_ != nullptr; }
  const std::shared_ptr<DeviceTransfer>& transfer() const { return transfer_; }
  const std::vector<Piece>& pieces(size_t chunk) const { return pieces_[chunk]; }
  size_t chunks() const { return pieces_.size(); }

  // Chunk `chunk`'s current values, as float32.
  std::vector<float> gather(size_t chunk) const;
  // Resume: appends chunk `chunk`'s optimizer slots, read from `optimizer`'s
  // restored state, to its values in `values`. Returns the updates the chunk
  // had: torch's count (Adam), or `updates` where torch keeps none (SGD).
  int64_t appendOptimizerState(size_t chunk, torch::optim::Optimizer& optimizer,
                               const optim::OptimizerSettings& settings, int64_t updates,
                               std::vector<float>& values) const;
  // Copies chunk `chunk`'s values, in `format` at `values`, into the
  // parameters; a piece already in place (values inside the parameter's own
  // memory) is left alone. Staged: into the host copies, then on to the
  // device after the compute queued so far on the calling thread's stream,
  // and that stream's later work waits for the copy.
  void scatter(size_t chunk, const void* values, WireDtype format);
  // The chunks, from the first, that hold the first `count` parameters.
  size_t chunksThrough(size_t count) const;
  // Moves every parameter's storage into `flat` (float32, the whole model in
  // key order), keeping its values, so that writes there are writes to the
  // model. `flat` must outlive the parameters' use of it (its deleter).
  // Not for a staged model.
  void placeIn(const torch::Tensor& flat);

 private:
  void stage(std::shared_ptr<DeviceTransfer> transfer, int64_t total);
  // Each parameter's storage becomes its place in `flat`, keeping its values
  // and identity (the optimizer's key).
  void moveInto(const torch::Tensor& flat);

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> trained_;
  std::shared_ptr<DeviceTransfer> transfer_;  // staged only
  torch::Tensor device_flat_, host_flat_;     // staged: the parameters, and params()' storage
  std::vector<DeviceTransfer::Marker> landed_;  // staged, by chunk: its last copy to the device
  std::vector<int64_t> offsets_;             // by parameter: its first float in key order
  std::vector<ps::Chunk> extents_;           // by chunk: where it lies in key order
  std::vector<std::vector<Piece>> pieces_;   // by chunk
  std::vector<size_t> chunks_through_;       // by parameter count
};

}  // namespace tandem::train
