#pragma once
// The ImageNet train and eval transforms, as torchvision defines them, on
// decoded RGB images: RandomResizedCrop(scale (0.08, 1), ratio (3/4, 4/3))
// + RandomHorizontalFlip for training; Resize(size * 256 / 224) +
// CenterCrop(size) for evaluation. Resampling is PIL's antialiased
// bilinear filter (torchvision's default), computed in float without
// rounding between passes. Randomness comes only from (seed, index).
// All functions are pure and thread-safe.
#include <cstdint>

#include "data/image_decode.hpp"
#include "data/normalization.hpp"

namespace tandem::data {

// A source region in pixel coordinates, possibly fractional.
struct CropBox {
  double y0 = 0;
  double x0 = 0;
  double height = 0;
  double width = 0;
};

struct ImageDraw {
  CropBox box;
  bool flip = false;
};

// torchvision's RandomResizedCrop.get_params (10 attempts, then a centre
// crop clamped to the ratio range) and a fair coin for the flip.
ImageDraw drawRandomResizedCrop(int height, int width, uint64_t seed, int64_t index);

// The region of the source that Resize(round(size * 256 / 224)) (shorter
// side) followed by CenterCrop(size) keeps.
CropBox centerCropBox(int height, int width, int64_t size);

// Resamples `box` of `image` to size x size, flips it if asked, and writes
// (pixel/255 - mean) / std as float [3, size, size] to `out`.
void resampleNormalized(const DecodedImage& image, const CropBox& box, bool flip, int64_t size,
                        const Normalization& norm, float* out);

}  // namespace tandem::data
