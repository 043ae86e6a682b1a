#pragma once
// JPEG (libjpeg-turbo) and PNG (libpng) decoding to 8-bit RGB. The format
// is told by the file's signature, not its extension (ImageNet has PNGs
// named .JPEG). Grayscale is expanded to RGB; alpha and transparency are
// dropped, as PIL's convert("RGB") does; CMYK JPEGs are converted. These
// functions report failure by return value, so a dataset can skip a bad
// file; none throws for bad data. All are thread-safe (no shared state).
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace tandem::data {

// Decompression-bomb guard: headers claiming more are refused unread.
inline constexpr int64_t kMaxImageSide = 1 << 15;
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 27;

struct ImageInfo {
  int width = 0;
  int height = 0;
};

struct DecodedImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel
};

// Reads only the signature and the header (JPEG markers up to the first
// scan, PNG chunks up to the first IDAT). On failure returns false and sets
// `error` to why (not naming the file).
bool probeImageFile(const std::filesystem::path& path, ImageInfo& info, std::string& error);

// Decodes a whole encoded image held in memory.
bool decodeImage(std::span<const uint8_t> bytes, DecodedImage& out, std::string& error);

// Reads `path` and decodes it.
bool decodeImageFile(const std::filesystem::path& path, DecodedImage& out, std::string& error);

}  // namespace tandem::data
