#include "data/synthetic_dataset.hpp"

#include <cmath>

#include "core/error.hpp"
#include "data/augment.hpp"
#include "data/hash.hpp"

namespace tandem::data {
namespace {

// Caps keep a typo (e.g. 224000) from turning into a multi-GB batch.
constexpr int64_t kMaxChannels = 1024;
constexpr int64_t kMaxSide = 8192;
constexpr int64_t kMaxSampleElements = int64_t{1} << 24;
constexpr int64_t kMaxClasses = 1 << 20;
constexpr int64_t kMaxTemplateElements = int64_t{1} << 26;
constexpr int64_t kMaxSize = int64_t{1} << 40;
// A coarse grid gives templates spatial structure a convnet can pool over.
constexpr int64_t kGrid = 8;
constexpr float kSqrt3 = 1.7320508f;

void checkRange(const char* option, int64_t value, int64_t max) {
  if (value <= 0 || value > max) {
    throw InputError(fmt::format("synthetic dataset: {} must be in [1, {}], got {}", option, max,
                                 value));
  }
}

// Unit-variance uniform noise in [-sqrt(3), sqrt(3)).
float centred(uint32_t bits) { return (2.0f * unitFloat(bits) - 1.0f) * kSqrt3; }

}  // namespace

SyntheticDataset::SyntheticDataset(SampleShape shape, int64_t num_classes, int64_t size,
                                   uint64_t seed, uint64_t split_id, bool augment)
    : shape_(shape),
      num_classes_(num_classes),
      size_(size),
      seed_(seed),
      split_key_(mixSeed(seed, 0x5eed5917ULL, split_id)),
      augment_(augment) {
  checkRange("channels", shape.channels, kMaxChannels);
  checkRange("height", shape.height, kMaxSide);
  checkRange("width", shape.width, kMaxSide);
  checkRange("channels*height*width", shape.channels * shape.height * shape.width,
             kMaxSampleElements);
  checkRange("classes", num_classes, kMaxClasses);
  checkRange("size", size, kMaxSize);
  grid_h_ = std::min(kGrid, shape.height);
  grid_w_ = std::min(kGrid, shape.width);
  const int64_t per_class = shape.channels * grid_h_ * grid_w_;
  if (num_classes * per_class > kMaxTemplateElements) {
    throw InputError(fmt::format(
        "synthetic dataset: {} classes x {} channels need {} template values; the limit is {}",
        num_classes, shape.channels, num_classes * per_class, kMaxTemplateElements));
  }
  templates_.resize(static_cast<size_t>(num_classes * per_class));
  const uint64_t template_key = mixSeed(seed_, 0x7e3b1a7eULL);
  for (size_t i = 0; i < templates_.size(); ++i) {
    templates_[i] = centred(static_cast<uint32_t>(mixSeed(template_key, i)));
  }
  row_cell_.resize(static_cast<size_t>(shape.height));
  for (int64_t y = 0; y < shape.height; ++y) row_cell_[y] = y * grid_h_ / shape.height;
  col_cell_.resize(static_cast<size_t>(shape.width));
  for (int64_t x = 0; x < shape.width; ++x) col_cell_[x] = x * grid_w_ / shape.width;
}

int64_t SyntheticDataset::labelOf(int64_t index) const {
  return static_cast<int64_t>(mixSeed(split_key_, 0x1abe1ULL, static_cast<uint64_t>(index)) %
                              static_cast<uint64_t>(num_classes_));
}

void SyntheticDataset::fillSample(int64_t index, float* dst) const {
  // Scaled so a sample has roughly zero mean and unit variance, like a
  // normalised real image.
  constexpr float kScale = 0.70710678f;
  const uint64_t key = mixSeed(split_key_, static_cast<uint64_t>(index));
  const float* tmpl = templates_.data() + labelOf(index) * shape_.channels * grid_h_ * grid_w_;
  uint64_t counter = 0;
  uint64_t bits = 0;
  bool have_half = false;
  for (int64_t c = 0; c < shape_.channels; ++c) {
    const float* plane = tmpl + c * grid_h_ * grid_w_;
    for (int64_t y = 0; y < shape_.height; ++y) {
      const float* trow = plane + row_cell_[y] * grid_w_;
      for (int64_t x = 0; x < shape_.width; ++x) {
        // One 64-bit hash feeds two pixels; this loop dominates big batches.
        uint32_t noise_bits;
        if (have_half) {
          noise_bits = static_cast<uint32_t>(bits >> 32);
        } else {
          bits = splitmix64(key + counter++);
          noise_bits = static_cast<uint32_t>(bits);
        }
        have_half = !have_half;
        *dst++ = (trow[col_cell_[x]] + centred(noise_bits)) * kScale;
      }
    }
  }
}

Batch SyntheticDataset::getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const {
  const auto count = static_cast<int64_t>(indices.size());
  const int64_t sample = shape_.channels * shape_.height * shape_.width;
  Batch batch;
  batch.inputs = torch::empty({count, shape_.channels, shape_.height, shape_.width}, torch::kFloat);
  batch.targets = torch::empty({count}, torch::kLong);
  float* out = batch.inputs.data_ptr<float>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  std::vector<float> scratch(augment_ ? static_cast<size_t>(sample) : 0);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = indices[k];
    TANDEM_ENFORCE(i >= 0 && i < size_, "index {} out of range for synthetic ({} samples)", i,
                   size_);
    targets[k] = labelOf(i);
    if (augment_) {
      fillSample(i, scratch.data());
      // 0 is the mean of a normalised image, as black padding is for real data.
      applyCropFlip<float>(scratch.data(), out + k * sample, shape_.channels, shape_.height,
                           shape_.width, drawCropFlip(augment_seed, i), 0.0f);
    } else {
      fillSample(i, out + k * sample);
    }
  }
  return batch;
}

}  // namespace tandem::data
