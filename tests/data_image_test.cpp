// Image decoding (libjpeg-turbo, libpng) and the ImageNet transforms. The
// test images are written with the libraries' own encoders, so the decoder
// is checked against an independent writer.
#include <gtest/gtest.h>

#include <cstdio>
#include <jpeglib.h>
#include <png.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <vector>

#include "data/image_decode.hpp"
#include "data/image_transform.hpp"
#include "support/process.hpp"
#include "support/byte_files.hpp"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using tandem::testing::TempDir;

void appendPng(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

// rows: tightly packed samples (big-endian for 16-bit), as libpng takes them.
Bytes encodePng(const Bytes& samples, int width, int height, int color_type, int bit_depth = 8) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    ADD_FAILURE() << "libpng could not write the test image";
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(png, &out, appendPng, nullptr);
  png_set_IHDR(png, info, width, height, bit_depth, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const size_t stride = samples.size() / static_cast<size_t>(height);
  for (int y = 0; y < height; ++y) png_write_row(png, const_cast<uint8_t*>(samples.data()) + y * stride);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// 4:4:4 sampling, so the only loss is the quantisation.
Bytes encodeJpeg(const Bytes& samples, int width, int height, int components, int quality) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = components;
  c.in_color_space = components == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  for (int i = 0; i < c.num_components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(samples.data()) + c.next_scanline * width * components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buffer, buffer + size);
  jpeg_destroy_compress(&c);
  std::free(buffer);
  return out;
}

uint8_t rgbAt(int x, int y, int c) { return static_cast<uint8_t>((x * 31 + y * 17 + c * 80) % 256); }

Bytes rgbPattern(int width, int height) {
  Bytes px;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) px.push_back(rgbAt(x, y, c));
  return px;
}

DecodedImage decodeOk(const Bytes& bytes) {
  DecodedImage img;
  std::string error;
  EXPECT_TRUE(decodeImage(bytes, img, error)) << error;
  return img;
}

TEST(DataImage, PngRgbDecodesExactly) {
  auto img = decodeOk(encodePng(rgbPattern(7, 5), 7, 5, PNG_COLOR_TYPE_RGB));
  ASSERT_EQ(img.width, 7);
  ASSERT_EQ(img.height, 5);
  EXPECT_EQ(img.rgb, rgbPattern(7, 5));
}

TEST(DataImage, PngGrayExpandsAndAlphaIsDroppedNotComposited) {
  Bytes gray{0, 10, 200, 255, 7, 99};
  auto g = decodeOk(encodePng(gray, 3, 2, PNG_COLOR_TYPE_GRAY));
  ASSERT_EQ(g.rgb.size(), 18u);
  for (size_t i = 0; i < gray.size(); ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(g.rgb[i * 3 + c], gray[i]) << i;
  }
  // Alpha 0 everywhere: compositing on black would give zeros.
  Bytes rgba;
  for (int i = 0; i < 4; ++i) {
    for (int v : {50 + i, 100 + i, 150 + i, 0}) rgba.push_back(static_cast<uint8_t>(v));
  }
  auto a = decodeOk(encodePng(rgba, 2, 2, PNG_COLOR_TYPE_RGB_ALPHA));
  EXPECT_EQ(a.rgb, (Bytes{50, 100, 150, 51, 101, 151, 52, 102, 152, 53, 103, 153}));
  Bytes gray_alpha{30, 0, 60, 255};
  EXPECT_EQ(decodeOk(encodePng(gray_alpha, 2, 1, PNG_COLOR_TYPE_GRAY_ALPHA)).rgb, (Bytes{30, 30, 30, 60, 60, 60}));
  // 16-bit samples keep their high byte.
  Bytes wide{0xAB, 0xCD, 0x12, 0x34};
  EXPECT_EQ(decodeOk(encodePng(wide, 2, 1, PNG_COLOR_TYPE_GRAY, 16)).rgb, (Bytes{0xAB, 0xAB, 0xAB, 0x12, 0x12, 0x12}));
}

TEST(DataImage, JpegDecodesWithinTolerance) {
  const int w = 32;
  const int h = 24;
  Bytes px;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      for (int v : {x * 8, y * 10, 255 - x * 4 - y * 4}) px.push_back(static_cast<uint8_t>(v));
    }
  auto img = decodeOk(encodeJpeg(px, w, h, 3, 95));
  ASSERT_EQ(img.width, w);
  ASSERT_EQ(img.height, h);
  ASSERT_EQ(img.rgb.size(), px.size());
  double total = 0;
  int worst = 0;
  for (size_t i = 0; i < px.size(); ++i) {
    const int d = std::abs(int{img.rgb[i]} - int{px[i]});
    worst = std::max(worst, d);
    total += d;
  }
  EXPECT_LE(worst, 12);
  EXPECT_LT(total / static_cast<double>(px.size()), 2.0);

  Bytes gray;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) gray.push_back(static_cast<uint8_t>(40 + x * 3 + y * 2));
  auto g = decodeOk(encodeJpeg(gray, w, h, 1, 95));
  ASSERT_EQ(g.rgb.size(), gray.size() * 3);
  for (size_t i = 0; i < gray.size(); ++i) {
    EXPECT_EQ(g.rgb[i * 3], g.rgb[i * 3 + 1]);
    EXPECT_EQ(g.rgb[i * 3], g.rgb[i * 3 + 2]);
    EXPECT_NEAR(g.rgb[i * 3], gray[i], 6) << i;
  }
}

TEST(DataImage, ProbeReadsHeadersAndNamesWhatIsWrong) {
  TempDir tmp;
  auto jpeg = encodeJpeg(rgbPattern(40, 30), 40, 30, 3, 90);
  auto png = encodePng(rgbPattern(9, 4), 9, 4, PNG_COLOR_TYPE_RGB);
  testing::writeBytes(tmp.path() / "a.jpg", jpeg);
  testing::writeBytes(tmp.path() / "b.png", png);
  testing::writeBytes(tmp.path() / "png-named.jpg", png);  // the signature decides, not the name
  ImageInfo info;
  std::string error;
  ASSERT_TRUE(probeImageFile(tmp.path() / "a.jpg", info, error)) << error;
  EXPECT_EQ(info.width, 40);
  EXPECT_EQ(info.height, 30);
  ASSERT_TRUE(probeImageFile(tmp.path() / "png-named.jpg", info, error)) << error;
  EXPECT_EQ(info.width, 9);
  EXPECT_EQ(info.height, 4);

  auto expectBad = [&](const std::string& name, const Bytes& bytes, const std::string& needle) {
    testing::writeBytes(tmp.path() / name, bytes);
    std::string why;
    ImageInfo unused;
    EXPECT_FALSE(probeImageFile(tmp.path() / name, unused, why)) << name;
    EXPECT_NE(why.find(needle), std::string::npos) << name << ": " << why;
  };
  expectBad("text.jpg", Bytes{'h', 'e', 'l', 'l', 'o'}, "not a JPEG or PNG");
  expectBad("empty.png", {}, "empty");
  expectBad("cut-header.png", Bytes(png.begin(), png.begin() + 20), "");
  expectBad("cut-header.jpg", Bytes(jpeg.begin(), jpeg.begin() + 30), "");
  // A header declaring 40000 x 1: refused before any pixel is read.
  Bytes huge = encodePng(Bytes(3, 0), 1, 1, PNG_COLOR_TYPE_RGB);
  huge[16] = 0;
  huge[17] = 0;
  huge[18] = 0x9c;
  huge[19] = 0x40;  // width 40000; the IHDR CRC no longer matches either
  expectBad("huge.png", huge, "");
  std::string missing_error;
  EXPECT_FALSE(probeImageFile(tmp.path() / "nope.png", info, missing_error));
  EXPECT_NE(missing_error.find("cannot open"), std::string::npos) << missing_error;
}

TEST(DataImage, TruncatedDataFailsToDecodeThoughTheHeaderParses) {
  auto jpeg = encodeJpeg(rgbPattern(64, 64), 64, 64, 3, 90);
  Bytes cut(jpeg.begin(), jpeg.begin() + static_cast<long>(jpeg.size() / 2));
  DecodedImage img;
  std::string error;
  EXPECT_FALSE(decodeImage(cut, img, error));
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  auto png = encodePng(rgbPattern(64, 64), 64, 64, PNG_COLOR_TYPE_RGB);
  Bytes cut_png(png.begin(), png.begin() + static_cast<long>(png.size() / 2));
  error.clear();
  EXPECT_FALSE(decodeImage(cut_png, img, error));
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(decodeImage(Bytes{'G', 'I', 'F', '8', '9', 'a', 0, 0}, img, error));
  EXPECT_NE(error.find("not a JPEG or PNG"), std::string::npos) << error;
}

const Normalization kIdentityNorm{{0, 0, 0}, {1, 1, 1}};

DecodedImage patternImage(int width, int height) { return {width, height, rgbPattern(width, height)}; }

TEST(DataImageTransform, SameSizeResampleIsExactAndFlipMirrors) {
  auto img = patternImage(6, 6);
  std::vector<float> out(3 * 36);
  std::vector<float> flipped(3 * 36);
  resampleNormalized(img, {0, 0, 6, 6}, false, 6, kIdentityNorm, out.data());
  resampleNormalized(img, {0, 0, 6, 6}, true, 6, kIdentityNorm, flipped.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 6; ++x) {
        EXPECT_NEAR(out[c * 36 + y * 6 + x], rgbAt(x, y, c) / 255.0f, 1e-6) << c << y << x;
        EXPECT_EQ(flipped[c * 36 + y * 6 + (5 - x)], out[c * 36 + y * 6 + x]);
      }
  // Normalisation: (v/255 - mean) / std per channel.
  Normalization norm{{0.1f, 0.2f, 0.3f}, {0.5f, 0.25f, 2.0f}};
  resampleNormalized(img, {0, 0, 6, 6}, false, 6, norm, out.data());
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(out[c * 36 + 7], (rgbAt(1, 1, c) / 255.0f - norm.mean[c]) / norm.std[c], 1e-5) << c;
  }
}

TEST(DataImageTransform, DownscalingAntialiasesLikePilBilinear) {
  // One bright column (x = 5) of a 16x16 image, shrunk 4x: PIL's filter
  // widens to 8 source pixels, so the column reaches outputs 0 and 1 with
  // weights 0.125/3.5 and 0.875/4 (plain bilinear would give 0 and 127.5).
  DecodedImage img{16, 16, Bytes(16 * 16 * 3, 0)};
  for (int y = 0; y < 16; ++y)
    for (int c = 0; c < 3; ++c) img.rgb[(y * 16 + 5) * 3 + c] = 255;
  std::vector<float> out(3 * 16);
  resampleNormalized(img, {0, 0, 16, 16}, false, 4, kIdentityNorm, out.data());
  EXPECT_NEAR(out[4 + 0] * 255, 255 * 0.125 / 3.5, 1e-3);
  EXPECT_NEAR(out[4 + 1] * 255, 255 * 0.875 / 4.0, 1e-3);
  EXPECT_NEAR(out[4 + 2], 0.0f, 1e-6);
}

TEST(DataImageTransform, EvalCropMatchesTorchvisionResizeThenCenterCrop) {
  // 400x300 (WxH), size 224: shorter side to 256, so 341x256; crop at
  // top round(16) = 16, left round(58.5) = 58 (half to even).
  auto box = centerCropBox(300, 400, 224);
  EXPECT_DOUBLE_EQ(box.y0, 16 * 300.0 / 256);
  EXPECT_DOUBLE_EQ(box.height, 224 * 300.0 / 256);
  EXPECT_DOUBLE_EQ(box.x0, 58 * 400.0 / 341);
  EXPECT_DOUBLE_EQ(box.width, 224 * 400.0 / 341);
  auto square = centerCropBox(256, 256, 224);
  EXPECT_DOUBLE_EQ(square.y0, 16);
  EXPECT_DOUBLE_EQ(square.x0, 16);
  EXPECT_DOUBLE_EQ(square.height, 224);
  // --image-size 32: shorter side round(32 * 256 / 224) = 37.
  auto small = centerCropBox(37, 74, 32);
  EXPECT_DOUBLE_EQ(small.height, 32);
  EXPECT_DOUBLE_EQ(small.y0, 2);  // round((37 - 32) / 2) = round(2.5) = 2

  // Deterministic: the same image always gives the same bits.
  auto img = patternImage(45, 31);
  std::vector<float> a(3 * 24 * 24);
  std::vector<float> b(3 * 24 * 24);
  auto eval = centerCropBox(31, 45, 24);
  resampleNormalized(img, eval, false, 24, imagenetNormalization(), a.data());
  resampleNormalized(img, eval, false, 24, imagenetNormalization(), b.data());
  EXPECT_EQ(a, b);
}

TEST(DataImageTransform, RandomResizedCropIsAPureFunctionOfSeedAndIndex) {
  const int h = 300;
  const int w = 400;
  std::set<std::tuple<double, double, double, double>> boxes;
  int flips = 0;
  const int draws = 2000;
  for (int i = 0; i < draws; ++i) {
    auto d = drawRandomResizedCrop(h, w, 77, i);
    auto again = drawRandomResizedCrop(h, w, 77, i);
    ASSERT_EQ(d.box.y0, again.box.y0);
    ASSERT_EQ(d.box.x0, again.box.x0);
    ASSERT_EQ(d.box.height, again.box.height);
    ASSERT_EQ(d.flip, again.flip);
    ASSERT_GE(d.box.y0, 0);
    ASSERT_GE(d.box.x0, 0);
    ASSERT_LE(d.box.y0 + d.box.height, h);
    ASSERT_LE(d.box.x0 + d.box.width, w);
    const double area = d.box.height * d.box.width / (h * w);
    const double ratio = d.box.width / d.box.height;
    EXPECT_GE(area, 0.08 - 0.01);
    EXPECT_GE(ratio, 0.75 - 0.02);
    EXPECT_LE(ratio, 4.0 / 3.0 + 0.02);
    boxes.insert({d.box.y0, d.box.x0, d.box.height, d.box.width});
    flips += d.flip ? 1 : 0;
  }
  EXPECT_GT(boxes.size(), static_cast<size_t>(draws * 9 / 10));
  EXPECT_NEAR(flips / static_cast<double>(draws), 0.5, 0.05);
  // Another seed (another epoch) draws other crops for the same index.
  int same = 0;
  for (int i = 0; i < 100; ++i) {
    same += drawRandomResizedCrop(h, w, 77, i).box.x0 == drawRandomResizedCrop(h, w, 78, i).box.x0 ? 1 : 0;
  }
  EXPECT_LT(same, 20);
}

TEST(DataImageTransform, RandomResizedCropFallsBackToACentreCrop) {
  // 50x1: no crop of 8%+ area fits in 10 attempts; the fallback cuts the
  // width to the largest allowed ratio (4/3 of 1 row rounds to 1) and centres it.
  auto d = drawRandomResizedCrop(1, 50, 5, 3);
  EXPECT_EQ(d.box.height, 1);
  EXPECT_EQ(d.box.width, 1);
  EXPECT_EQ(d.box.x0, 24);
  EXPECT_EQ(d.box.y0, 0);
}

}  // namespace
}  // namespace tandem::data
