#include "data/normalization.hpp"

#include <fmt/ranges.h>

#include <array>
#include <cmath>

#include "core/error.hpp"

namespace tandem::data {
namespace {

void checkCount(const std::vector<float>& values, int64_t channels, const char* flag) {
  if (static_cast<int64_t>(values.size()) != channels) {
    throw InputError(fmt::format("{}: {} value(s) given ({}) but the data has {} channel(s); give one per channel",
                                 flag, values.size(), fmt::join(values, ","), channels));
  }
}

}  // namespace

Normalization imagenetNormalization() { return {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}; }

Normalization computeNormalization(const torch::Tensor& images) {
  TANDEM_ENFORCE(images.dim() == 4 && images.scalar_type() == torch::kByte, "images must be uint8 NCHW");
  auto bytes = images.contiguous();
  const int64_t n = bytes.size(0);
  const int64_t channels = bytes.size(1);
  const int64_t plane = bytes.size(2) * bytes.size(3);
  // Integer counts: the result does not depend on summation order.
  std::vector<std::array<uint64_t, 256>> hist(static_cast<size_t>(channels));
  for (auto& h : hist) h.fill(0);
  const uint8_t* p = bytes.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < channels; ++c) {
      auto& h = hist[static_cast<size_t>(c)];
      for (int64_t k = 0; k < plane; ++k) ++h[*p++];
    }
  }
  Normalization norm;
  for (const auto& h : hist) {
    double count = 0;
    double sum = 0;
    for (int v = 0; v < 256; ++v) {
      count += static_cast<double>(h[v]);
      sum += static_cast<double>(h[v]) * v;
    }
    const double mean = count > 0 ? sum / count / 255.0 : 0.0;
    double var = 0;
    for (int v = 0; v < 256; ++v) {
      const double d = v / 255.0 - mean;
      var += static_cast<double>(h[v]) * d * d;
    }
    var = count > 0 ? var / count : 0.0;
    const double sd = std::sqrt(var);
    norm.mean.push_back(static_cast<float>(mean));
    norm.std.push_back(sd > 0 ? static_cast<float>(sd) : 1.0f);
  }
  return norm;
}

Normalization resolveNormalization(const DatasetOptions& options, int64_t channels,
                                   const std::function<Normalization()>& fallback) {
  const bool have_mean = !options.normalize_mean.empty();
  const bool have_std = !options.normalize_std.empty();
  if (have_mean) checkCount(options.normalize_mean, channels, "--normalize-mean");
  if (have_std) checkCount(options.normalize_std, channels, "--normalize-std");
  for (float m : options.normalize_mean) {
    if (!std::isfinite(m)) throw InputError(fmt::format("--normalize-mean: {} is not a finite number", m));
  }
  for (float s : options.normalize_std) {
    if (!(std::isfinite(s) && s > 0)) {
      throw InputError(fmt::format("--normalize-std: {} is not a positive finite number", s));
    }
  }
  Normalization norm;
  if (!have_mean || !have_std) norm = fallback();
  if (have_mean) norm.mean = options.normalize_mean;
  if (have_std) norm.std = options.normalize_std;
  TANDEM_ENFORCE(static_cast<int64_t>(norm.mean.size()) == channels &&
                     static_cast<int64_t>(norm.std.size()) == channels,
                 "normalisation has {} means and {} stds for {} channels", norm.mean.size(), norm.std.size(),
                 channels);
  return norm;
}

std::string describe(const Normalization& norm) {
  return fmt::format("mean {:.4f} std {:.4f}", fmt::join(norm.mean, ","), fmt::join(norm.std, ","));
}

}  // namespace tandem::data
