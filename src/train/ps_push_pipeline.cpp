#include "train/ps_push_pipeline.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "ps/worker.hpp"
#include "train/ps_host_group.hpp"

namespace tandem::train {

PsPushPipeline::PsPushPipeline(ps::Worker& worker, ChunkedParameters& model, PsHostGroup* host,
                               torch::Tensor shared_grads, bool from_autograd)
    : worker_(worker), model_(model), host_(host) {
  if (model_.staged()) stager_ = std::make_unique<collective::CommThread>();
  const ps::KeyLayout& layout = worker_.layout();
  std::vector<GradientCapture::Range> chunk_ranges;
  for (const auto& chunk : layout.chunks) chunk_ranges.push_back({chunk.begin, chunk.length});
  // Each chunk is pushed the moment its last gradient is in, in whatever
  // order backward completes them. Host-mates must sum chunks in one order:
  // last chunk first (backward's), strictly.
  const bool grouped = host_ != nullptr;
  if (grouped) std::reverse(chunk_ranges.begin(), chunk_ranges.end());
  const size_t last_chunk = chunk_ranges.size() - 1;
  capture_ = std::make_unique<GradientCapture>(
      model_.trained(), layout.tensor_offsets, layout.total_floats, chunk_ranges, /*in_order=*/grouped,
      [this, grouped, last_chunk](size_t group) { groupReady(group, grouped ? last_chunk - group : group); },
      std::move(shared_grads), model_.transfer());
  if (!from_autograd) capture_->detachFromAutograd();
}

PsPushPipeline::~PsPushPipeline() {
  stager_.reset();   // its queued jobs (a failed step's) use the capture and the worker
  capture_.reset();  // its hooks go with it
}

void PsPushPipeline::beginMicroStep(int64_t step, int micro_step, bool last, double scale) {
  step_.store(step, std::memory_order_relaxed);
  capture_->beginMicroStep(micro_step, last, scale);
}

void PsPushPipeline::offer(int64_t step, const std::vector<torch::Tensor>& gradients, double scale) {
  enforceEq(gradients.size(), model_.trained().size(), "offered gradients per trainable parameter");
  step_.store(step, std::memory_order_relaxed);
  capture_->beginMicroStep(0, /*last=*/true, scale);
  // Last first, as backward would: host-mates sum chunks in that order.
  for (size_t p = gradients.size(); p-- > 0;) capture_->offer(p, gradients[p]);
}

void PsPushPipeline::drain(Deadline deadline) {
  capture_->flush();  // parameters without a gradient this update push zeros
  if (stager_) staged_.wait(deadline, "gradient chunks' copies from the GPU and their pushes");
  if (host_) host_->awaitReduces(deadline);
}

// Capture group `group` (chunk `chunk`) is complete, on the autograd thread.
void PsPushPipeline::groupReady(size_t group, size_t chunk) {
  if (!stager_) return chunkReady(chunk);
  staged_ = stager_->submit([this, group, chunk] {
    capture_->awaitOnHost(group);
    chunkReady(chunk);
  });
}

// Hierarchical: the host sums the chunk first; its owner pushes the sum.
void PsPushPipeline::chunkReady(size_t chunk) {
  if (!host_) return push(chunk);
  host_->reduce(capture_->flat().data_ptr<float>(), chunk, [this](size_t own) { push(own); });
}

// Zero-copy: the next backward rewrites these floats only after the server
// answered a later request on the same connection. The worker rounds them
// for a 16-bit wire.
void PsPushPipeline::push(size_t chunk) {
  worker_.push(chunk, capture_->flat().data_ptr<float>() + worker_.layout().chunks[chunk].begin,
               step_.load(std::memory_order_relaxed));
}

}  // namespace tandem::train
