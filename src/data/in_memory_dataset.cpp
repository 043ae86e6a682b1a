#include "data/in_memory_dataset.hpp"

#include <utility>

#include "core/error.hpp"
#include "data/augment.hpp"

namespace tandem::data {

InMemoryDataset::InMemoryDataset(std::string name, torch::Tensor images, torch::Tensor labels,
                                 int64_t num_classes, const Normalization& norm, bool augment)
    : name_(std::move(name)),
      images_(images.contiguous()),
      labels_(labels.to(torch::kLong).contiguous()),
      num_classes_(num_classes),
      augment_(augment) {
  TANDEM_ENFORCE(images_.dim() == 4 && images_.scalar_type() == torch::kByte,
                 "images must be uint8 NCHW, got {} dims", images_.dim());
  TANDEM_ENFORCE(labels_.dim() == 1 && labels_.size(0) == images_.size(0),
                 "{} labels for {} images", labels_.numel(), images_.size(0));
  shape_ = {images_.size(1), images_.size(2), images_.size(3)};
  auto channels = static_cast<size_t>(shape_.channels);
  TANDEM_ENFORCE(norm.mean.size() == channels && norm.std.size() == channels,
                 "normalization has {} means for {} channels", norm.mean.size(), channels);
  std::vector<float> scale(channels);
  std::vector<float> shift(channels);
  for (size_t c = 0; c < channels; ++c) {
    scale[c] = 1.0f / (255.0f * norm.std[c]);
    shift[c] = -norm.mean[c] / norm.std[c];
  }
  auto view = std::vector<int64_t>{1, shape_.channels, 1, 1};
  scale_ = torch::tensor(scale).view(view);
  shift_ = torch::tensor(shift).view(view);
}

Batch InMemoryDataset::getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const {
  const int64_t n = size();
  for (int64_t i : indices) {
    TANDEM_ENFORCE(i >= 0 && i < n, "index {} out of range for {} ({} samples)", i, name_, n);
  }
  auto count = static_cast<int64_t>(indices.size());
  // from_blob does not copy; the index tensor only lives for this call.
  auto index = torch::from_blob(const_cast<int64_t*>(indices.data()), {count}, torch::kLong);
  torch::Tensor bytes =
      augment_ ? gatherAugmented(indices, augment_seed) : images_.index_select(0, index);
  Batch batch;
  batch.inputs = bytes.to(torch::kFloat).mul_(scale_).add_(shift_);
  batch.targets = labels_.index_select(0, index);
  return batch;
}

torch::Tensor InMemoryDataset::gatherAugmented(std::span<const int64_t> indices,
                                               uint64_t augment_seed) const {
  const int64_t sample = shape_.channels * shape_.height * shape_.width;
  auto out = torch::empty({static_cast<int64_t>(indices.size()), shape_.channels, shape_.height,
                           shape_.width},
                          torch::kByte);
  const uint8_t* src = images_.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (size_t k = 0; k < indices.size(); ++k) {
    // Pad with black pixels, as torchvision pads the raw image before normalising.
    applyCropFlip<uint8_t>(src + indices[k] * sample, dst + static_cast<int64_t>(k) * sample,
                           shape_.channels, shape_.height, shape_.width,
                           drawCropFlip(augment_seed, indices[k]), 0);
  }
  return out;
}

}  // namespace tandem::data
