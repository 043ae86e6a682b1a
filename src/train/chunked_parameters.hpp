#pragma once
// A model's trainable parameters seen as a parameter-server layout's
// chunks: which floats of which parameter each chunk holds, copies between
// chunks and parameters, and which chunks a forward needs first.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "core/wire_dtype.hpp"
#include "ps/key_layout.hpp"

namespace tandem::train {

class ChunkedParameters {
 public:
  // Where a chunk's floats live in one parameter.
  struct Piece {
    size_t param = 0;
    int64_t param_offset = 0, chunk_offset = 0, count = 0;
  };

  ChunkedParameters() = default;
  // `params`: contiguous float32, in the layout's key order.
  ChunkedParameters(std::vector<torch::Tensor> params, const ps::KeyLayout& layout);

  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<Piece>& pieces(size_t chunk) const { return pieces_[chunk]; }
  size_t chunks() const { return pieces_.size(); }

  // Chunk `chunk`'s current values, as float32.
  std::vector<float> gather(size_t chunk) const;
  // Copies chunk `chunk`'s values, in `format` at `values`, into the
  // parameters; a piece already in place (values inside the parameter's own
  // memory) is left alone.
  void scatter(size_t chunk, const void* values, WireDtype format);
  // The chunks, from the first, that hold the first `count` parameters.
  size_t chunksThrough(size_t count) const;
  // Moves every parameter's storage into `flat` (float32, the whole model in
  // key order), keeping its values, so that writes there are writes to the
  // model. `flat` must outlive the parameters' use of it (its deleter).
  void placeIn(const torch::Tensor& flat);

 private:
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;             // by parameter: its first float in key order
  std::vector<std::vector<Piece>> pieces_;   // by chunk
  std::vector<size_t> chunks_through_;       // by parameter count
};

}  // namespace tandem::train
