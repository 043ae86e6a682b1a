#include "data/image_transform.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "data/hash.hpp"

namespace tandem::data {
namespace {

// A counter-based stream: the k-th draw is a pure function of (key, k).
class DrawStream {
 public:
  explicit DrawStream(uint64_t key) : key_(key) {}
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(splitmix64(key_ + counter_++) >> 11) * 0x1p-53; }
  // Uniform integer in [0, n], as torch.randint(0, n + 1).
  int upTo(int n) { return std::min(n, static_cast<int>(uniform() * (n + 1))); }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// Python's round(): half to even, which nearbyint does in the default mode.
int roundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

// PIL's precompute_coeffs for the bilinear (triangle) filter: output pixel
// i of [in0, in1) mapped onto out_size pixels reads source pixels
// start[i] .. start[i] + count[i] - 1 with the given weights. Downscaling
// widens the filter (antialiasing).
struct Taps {
  std::vector<int> start;
  std::vector<int> count;
  std::vector<float> weights;  // max_taps per output pixel
  int max_taps = 0;
};

Taps computeTaps(double in0, double in1, int in_size, int64_t out_size) {
  const double scale = (in1 - in0) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = filterscale;  // the triangle's support is 1
  Taps t;
  t.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.start.resize(static_cast<size_t>(out_size));
  t.count.resize(static_cast<size_t>(out_size));
  t.weights.assign(static_cast<size_t>(out_size * t.max_taps), 0.0f);
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = in0 + (static_cast<double>(i) + 0.5) * scale;
    int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    lo = std::min(lo, in_size - 1);
    hi = std::clamp(hi, lo + 1, std::min(in_size, lo + t.max_taps));
    float* w = &t.weights[static_cast<size_t>(i * t.max_taps)];
    double total = 0;
    for (int x = lo; x < hi; ++x) {
      const double d = std::abs((x - center + 0.5) / filterscale);
      const double v = d < 1.0 ? 1.0 - d : 0.0;
      w[x - lo] = static_cast<float>(v);
      total += v;
    }
    if (total > 0) {
      for (int x = 0; x < hi - lo; ++x) w[x] = static_cast<float>(w[x] / total);
    } else {
      w[0] = 1.0f;  // degenerate box: nearest source pixel
      hi = lo + 1;
    }
    t.start[static_cast<size_t>(i)] = lo;
    t.count[static_cast<size_t>(i)] = hi - lo;
  }
  return t;
}

}  // namespace

ImageDraw drawRandomResizedCrop(int height, int width, uint64_t seed, int64_t index) {
  constexpr double kScaleMin = 0.08;
  constexpr double kScaleMax = 1.0;
  const double log_ratio_min = std::log(3.0 / 4.0);
  const double log_ratio_max = std::log(4.0 / 3.0);
  DrawStream draws(mixSeed(seed, static_cast<uint64_t>(index), 0x1a6e5c0bULL));
  ImageDraw out;
  out.flip = draws.uniform() < 0.5;
  const double area = static_cast<double>(height) * width;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (kScaleMin + (kScaleMax - kScaleMin) * draws.uniform());
    const double aspect = std::exp(log_ratio_min + (log_ratio_max - log_ratio_min) * draws.uniform());
    const int w = roundHalfEven(std::sqrt(target_area * aspect));
    const int h = roundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int y = draws.upTo(height - h);
      const int x = draws.upTo(width - w);
      out.box = {static_cast<double>(y), static_cast<double>(x), static_cast<double>(h), static_cast<double>(w)};
      return out;
    }
  }
  // Fallback: the whole image, cut to the nearest allowed ratio, centred.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width;
  int h = height;
  if (in_ratio < 3.0 / 4.0) {
    h = std::max(1, roundHalfEven(w / (3.0 / 4.0)));
  } else if (in_ratio > 4.0 / 3.0) {
    w = std::max(1, roundHalfEven(h * (4.0 / 3.0)));
  }
  h = std::min(h, height);
  w = std::min(w, width);
  out.box = {static_cast<double>((height - h) / 2), static_cast<double>((width - w) / 2), static_cast<double>(h),
             static_cast<double>(w)};
  return out;
}

CropBox centerCropBox(int height, int width, int64_t size) {
  const int64_t shorter = std::max<int64_t>(size, std::llround(static_cast<double>(size) * 256.0 / 224.0));
  // torchvision's Resize: the shorter side becomes `shorter`, the longer one
  // keeps the aspect ratio, truncated.
  int64_t rh = shorter;
  int64_t rw = shorter;
  if (height < width) {
    rw = std::max<int64_t>(shorter, static_cast<int64_t>(static_cast<double>(shorter) * width / height));
  } else if (width < height) {
    rh = std::max<int64_t>(shorter, static_cast<int64_t>(static_cast<double>(shorter) * height / width));
  }
  const double top = std::nearbyint(static_cast<double>(rh - size) / 2.0);
  const double left = std::nearbyint(static_cast<double>(rw - size) / 2.0);
  const double sy = static_cast<double>(height) / static_cast<double>(rh);
  const double sx = static_cast<double>(width) / static_cast<double>(rw);
  return {top * sy, left * sx, static_cast<double>(size) * sy, static_cast<double>(size) * sx};
}

void resampleNormalized(const DecodedImage& image, const CropBox& box, bool flip, int64_t size,
                        const Normalization& norm, float* out) {
  TANDEM_ENFORCE(image.width > 0 && image.height > 0 && size > 0, "empty image or size");
  TANDEM_ENFORCE(norm.mean.size() == 3 && norm.std.size() == 3, "RGB needs 3 means and 3 stds");
  const Taps tx = computeTaps(box.x0, box.x0 + box.width, image.width, size);
  const Taps ty = computeTaps(box.y0, box.y0 + box.height, image.height, size);
  // Only the source rows some output row reads go through the horizontal pass.
  const int row0 = ty.start.front();
  const int row1 = ty.start.back() + ty.count.back();
  const auto s = static_cast<size_t>(size);
  std::vector<float> rows(static_cast<size_t>(row1 - row0) * s * 3);
  const size_t stride = static_cast<size_t>(image.width) * 3;
  for (int y = row0; y < row1; ++y) {
    const uint8_t* src = image.rgb.data() + static_cast<size_t>(y) * stride;
    float* dst = rows.data() + static_cast<size_t>(y - row0) * s * 3;
    for (size_t x = 0; x < s; ++x) {
      const uint8_t* p = src + static_cast<size_t>(tx.start[x]) * 3;
      const float* w = &tx.weights[x * static_cast<size_t>(tx.max_taps)];
      float r = 0, g = 0, b = 0;
      for (int k = 0; k < tx.count[x]; ++k, p += 3) {
        r += w[k] * p[0];
        g += w[k] * p[1];
        b += w[k] * p[2];
      }
      dst[x * 3] = r;
      dst[x * 3 + 1] = g;
      dst[x * 3 + 2] = b;
    }
  }
  float scale[3];
  float shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * norm.std[c]);
    shift[c] = -norm.mean[c] / norm.std[c];
  }
  const size_t plane = s * s;
  std::vector<float> acc(s * 3);
  for (size_t y = 0; y < s; ++y) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* w = &ty.weights[y * static_cast<size_t>(ty.max_taps)];
    for (int k = 0; k < ty.count[y]; ++k) {
      const float* src = rows.data() + static_cast<size_t>(ty.start[y] + k - row0) * s * 3;
      for (size_t i = 0; i < s * 3; ++i) acc[i] += w[k] * src[i];
    }
    for (size_t x = 0; x < s; ++x) {
      const size_t ox = flip ? s - 1 - x : x;
      for (int c = 0; c < 3; ++c) out[c * plane + y * s + ox] = acc[x * 3 + c] * scale[c] + shift[c];
    }
  }
}

}  // namespace tandem::data
