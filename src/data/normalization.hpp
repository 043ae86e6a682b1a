#pragma once
// Per-channel input normalisation: from flags, computed from the training
// set, or a known default. Computing it is exact and deterministic (integer
// histograms), so a resumed run normalises bit-identically.
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "data/dataset_options.hpp"

namespace tandem::data {

// Per-channel statistics of pixel/255, applied as (x/255 - mean) / std.
struct Normalization {
  std::vector<float> mean;
  std::vector<float> std;
};

// ImageNet's published statistics, torchvision's defaults.
Normalization imagenetNormalization();

// Mean and population standard deviation of pixel/255 per channel over every
// pixel of `images` (uint8 [N, C, H, W]). A constant channel gets std 1, so
// normalising never divides by zero. Thread-safe.
Normalization computeNormalization(const torch::Tensor& images);

// options.normalize_mean / normalize_std where given, each channel's
// statistics from `fallback` otherwise (called only if one is missing).
// Throws InputError naming --normalize-mean or --normalize-std when a list
// does not have `channels` values, or a std is not positive and finite.
Normalization resolveNormalization(const DatasetOptions& options, int64_t channels,
                                   const std::function<Normalization()>& fallback);

// "mean 0.2860 std 0.3530" (comma-separated per channel), for the log.
std::string describe(const Normalization& norm);

}  // namespace tandem::data
