#include "train/gradient_buckets.hpp"

#include "core/error.hpp"
#include "collective/bucket_size.hpp"

namespace tandem::train {

size_t bucketCapBytes(torch::nn::Module& model, double bucket_mb) {
  if (bucket_mb > 0) return static_cast<size_t>(bucket_mb * 1024 * 1024);
  int64_t floats = 0;
  for (const auto& p : model.parameters()) floats += p.requires_grad() ? p.numel() : 0;
  return static_cast<size_t>(collective::autoBucketFloats(floats)) * sizeof(float);
}

GradientBuckets::GradientBuckets(torch::nn::Module& model, size_t cap_bytes, size_t extra_tail, LaunchFn launch,
                                 std::function<void()> before_last_launch, bool on_device) {
  std::vector<torch::Tensor> params;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (p.scalar_type() != torch::kFloat32 || p.is_sparse()) {
      throw Error(fmt::format("parameter {} is {} but all-reduce buckets hold dense float32", item.key(),
                              std::string(c10::toString(p.scalar_type()))));
    }
    params.push_back(p);
  }
  TANDEM_ENFORCE(!params.empty(), "model has no trainable parameters");
  TANDEM_ENFORCE(!on_device || extra_tail == 0, "buckets on the device carry no host tail");

  // Reverse registration order approximates the order backward produces them.
  const auto cap_elements = static_cast<int64_t>(std::max<size_t>(1, cap_bytes / sizeof(float)));
  std::vector<int64_t> offsets(params.size());
  std::vector<GradientCapture::Range> buckets(1);
  int64_t offset = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t n = params[k].numel();
    if (buckets.back().length > 0 && buckets.back().length + n > cap_elements) {
      buckets.push_back({offset, 0});
    }
    offsets[k] = offset;
    buckets.back().length += n;
    offset += n;
  }
  buckets.back().length += static_cast<int64_t>(extra_tail);
  bucket_count_ = buckets.size();
  const size_t last = buckets.size() - 1;
  // The capture hands buckets over in order; the callback reads the bucket
  // views from it, so it is set up once the capture exists.
  auto views = std::make_shared<std::vector<torch::Tensor>>();
  capture_ = std::make_unique<GradientCapture>(
      params, offsets, offset + static_cast<int64_t>(extra_tail), buckets, /*in_order=*/true,
      [views, last, launch = std::move(launch), before = std::move(before_last_launch)](size_t b) {
        if (b == last && before) before();
        launch(b, (*views)[b]);
      },
      torch::Tensor(), on_device ? nullptr : hostStagingFor(params.front().device()));
  for (size_t b = 0; b < buckets.size(); ++b) views->push_back(capture_->group(b));
  tail_ = capture_->flat().narrow(0, offset, static_cast<int64_t>(extra_tail));
}

size_t GradientBuckets::bucketBytes(size_t bucket) const {
  TANDEM_ENFORCE(bucket < bucket_count_, "bucket {} of {}", bucket, bucket_count_);
  return static_cast<size_t>(capture_->group(bucket).numel()) * sizeof(float);
}

}  // namespace tandem::train
