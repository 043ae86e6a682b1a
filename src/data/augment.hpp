#pragma once
// CIFAR-style augmentation: pad by 4 with a fill value, crop back to the
// original size at a random offset, then maybe flip horizontally. The draw
// depends only on (augment_seed, sample index) so a batch is reproducible
// from any thread. Raw loops over one sample are fast enough (a few
// thousand pixels) and avoid per-sample tensor allocations.
#include <cstdint>

#include "data/hash.hpp"

namespace tandem::data {

inline constexpr int kAugmentPad = 4;

struct CropFlip {
  int dy = 0;  // source row of output row 0, relative to the unpadded image
  int dx = 0;
  bool flip = false;
};

inline CropFlip drawCropFlip(uint64_t augment_seed, int64_t index) {
  uint64_t r = mixSeed(augment_seed, static_cast<uint64_t>(index));
  constexpr uint64_t kChoices = 2 * kAugmentPad + 1;
  CropFlip cf;
  cf.dy = static_cast<int>(r % kChoices) - kAugmentPad;
  cf.dx = static_cast<int>((r >> 16) % kChoices) - kAugmentPad;
  cf.flip = ((r >> 32) & 1) != 0;
  return cf;
}

// Writes one augmented [C, H, W] sample from src to dst (no aliasing).
// Crop first, then flip, matching torchvision's RandomCrop + RandomHorizontalFlip.
template <class T>
void applyCropFlip(const T* src, T* dst, int64_t channels, int64_t height, int64_t width,
                   const CropFlip& cf, T fill) {
  for (int64_t c = 0; c < channels; ++c) {
    const T* plane = src + c * height * width;
    T* out_plane = dst + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      T* out = out_plane + y * width;
      int64_t sy = y + cf.dy;
      if (sy < 0 || sy >= height) {
        for (int64_t x = 0; x < width; ++x) out[x] = fill;
        continue;
      }
      const T* row = plane + sy * width;
      // Output column x reads cropped column (flip ? width-1-x : x), which is
      // source column that + dx; the valid span is where that lies in [0, width).
      for (int64_t x = 0; x < width; ++x) {
        int64_t cx = cf.flip ? width - 1 - x : x;
        int64_t sx = cx + cf.dx;
        out[x] = (sx >= 0 && sx < width) ? row[sx] : fill;
      }
    }
  }
}

}  // namespace tandem::data
