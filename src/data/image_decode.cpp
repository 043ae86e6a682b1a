#include "data/image_decode.hpp"

// jpeglib.h needs FILE and size_t declared first.
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <fstream>
#include <memory>

#include <fmt/format.h>

namespace tandem::data {
namespace {

// The libraries report fatal errors through a callback that must not
// return; longjmp back to the decoding function is their documented way.
// Every function below that calls setjmp keeps its C++ objects outside the
// jump (in the caller or a state struct), so no destructor is skipped.

enum class Format { kJpeg, kPng, kUnknown };

Format sniff(const uint8_t* p, size_t n) {
  static constexpr uint8_t kPngSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return Format::kJpeg;
  if (n >= 8 && std::memcmp(p, kPngSig, 8) == 0) return Format::kPng;
  return Format::kUnknown;
}

bool sizeOk(int64_t width, int64_t height, std::string& error) {
  if (width <= 0 || height <= 0 || width > kMaxImageSide || height > kMaxImageSide ||
      width * height > kMaxImagePixels) {
    error = fmt::format("image size {}x{} is empty or beyond the {}x{} / {} pixel limit", width, height,
                        kMaxImageSide, kMaxImageSide, kMaxImagePixels);
    return false;
  }
  return true;
}

// ---- JPEG -----------------------------------------------------------------

struct JpegErrorManager {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void onJpegError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings are not printed; a premature end of data is a corrupt file (PIL
// refuses truncated images too), other warnings are tolerated as PIL does.
void onJpegMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) err->truncated = true;
  cinfo->err->num_warnings++;
}

void initJpegErrors(jpeg_decompress_struct& cinfo, JpegErrorManager& err) {
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = onJpegError;
  err.mgr.emit_message = onJpegMessage;
  err.message[0] = '\0';
  err.truncated = false;
}

struct JpegProbe {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
};

bool probeJpeg(std::FILE* file, JpegProbe& s, ImageInfo& info, std::string& error) {
  initJpegErrors(s.cinfo, s.err);
  if (setjmp(s.err.jump)) {
    jpeg_destroy_decompress(&s.cinfo);
    error = s.err.message;
    return false;
  }
  jpeg_create_decompress(&s.cinfo);
  jpeg_stdio_src(&s.cinfo, file);
  jpeg_read_header(&s.cinfo, TRUE);
  info.width = static_cast<int>(s.cinfo.image_width);
  info.height = static_cast<int>(s.cinfo.image_height);
  const bool truncated = s.err.truncated;
  jpeg_destroy_decompress(&s.cinfo);
  if (truncated) {
    error = "truncated: file ends inside the JPEG header";
    return false;
  }
  return sizeOk(info.width, info.height, error);
}

struct JpegDecode {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  std::vector<uint8_t> cmyk_row;
};

// Adobe writes CMYK JPEGs inverted (0 = full ink), which is what
// libjpeg hands back; RGB = (inverted ink) * (inverted black) / 255.
void cmykToRgb(const uint8_t* cmyk, uint8_t* rgb, int width) {
  for (int x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const int k = cmyk[3];
    rgb[0] = static_cast<uint8_t>((cmyk[0] * k + 127) / 255);
    rgb[1] = static_cast<uint8_t>((cmyk[1] * k + 127) / 255);
    rgb[2] = static_cast<uint8_t>((cmyk[2] * k + 127) / 255);
  }
}

bool decodeJpeg(std::span<const uint8_t> bytes, JpegDecode& s, DecodedImage& out, std::string& error) {
  initJpegErrors(s.cinfo, s.err);
  if (setjmp(s.err.jump)) {
    jpeg_destroy_decompress(&s.cinfo);
    error = s.err.message;
    return false;
  }
  jpeg_create_decompress(&s.cinfo);
  jpeg_mem_src(&s.cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&s.cinfo, TRUE);
  if (!sizeOk(s.cinfo.image_width, s.cinfo.image_height, error)) {
    jpeg_destroy_decompress(&s.cinfo);
    return false;
  }
  const bool cmyk = s.cinfo.jpeg_color_space == JCS_CMYK || s.cinfo.jpeg_color_space == JCS_YCCK;
  // libjpeg-turbo converts grayscale and YCbCr to RGB itself.
  s.cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&s.cinfo);
  out.width = static_cast<int>(s.cinfo.output_width);
  out.height = static_cast<int>(s.cinfo.output_height);
  const size_t stride = static_cast<size_t>(out.width) * 3;
  out.rgb.resize(stride * static_cast<size_t>(out.height));
  if (cmyk) s.cmyk_row.resize(static_cast<size_t>(out.width) * 4);
  while (s.cinfo.output_scanline < s.cinfo.output_height) {
    uint8_t* dst = out.rgb.data() + stride * s.cinfo.output_scanline;
    JSAMPROW row = cmyk ? s.cmyk_row.data() : dst;
    jpeg_read_scanlines(&s.cinfo, &row, 1);
    if (cmyk) cmykToRgb(s.cmyk_row.data(), dst, out.width);
  }
  jpeg_finish_decompress(&s.cinfo);
  const bool truncated = s.err.truncated;
  jpeg_destroy_decompress(&s.cinfo);
  if (truncated) {
    error = "truncated: premature end of JPEG data";
    return false;
  }
  return true;
}

// ---- PNG ------------------------------------------------------------------

struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  char message[256] = {};
  std::span<const uint8_t> bytes;
  size_t pos = 0;
  std::vector<png_bytep> rows;
};

void onPngError(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof(s->message), "%s", msg);
  png_longjmp(png, 1);
}

void onPngWarning(png_structp, png_const_charp) {}

void readPngBytes(png_structp png, png_bytep out, png_size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > s->bytes.size() - s->pos) png_error(png, "truncated: file ends inside the PNG data");
  std::memcpy(out, s->bytes.data() + s->pos, n);
  s->pos += n;
}

// Creates the read structs; false if libpng cannot allocate them.
bool createPng(PngState& s, std::string& error) {
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, onPngError, onPngWarning);
  if (s.png) s.info = png_create_info_struct(s.png);
  if (!s.png || !s.info) {
    png_destroy_read_struct(s.png ? &s.png : nullptr, nullptr, nullptr);
    error = "libpng could not allocate its read state";
    return false;
  }
  png_set_user_limits(s.png, kMaxImageSide, kMaxImageSide);
  // An odd colour profile or ancillary chunk is no reason to drop an image.
  png_set_benign_errors(s.png, 1);
  return true;
}

bool probePng(std::FILE* file, PngState& s, ImageInfo& info, std::string& error) {
  if (!createPng(s, error)) return false;
  if (setjmp(png_jmpbuf(s.png))) {
    png_destroy_read_struct(&s.png, &s.info, nullptr);
    error = s.message;
    return false;
  }
  png_init_io(s.png, file);
  png_read_info(s.png, s.info);
  info.width = static_cast<int>(png_get_image_width(s.png, s.info));
  info.height = static_cast<int>(png_get_image_height(s.png, s.info));
  png_destroy_read_struct(&s.png, &s.info, nullptr);
  return sizeOk(info.width, info.height, error);
}

bool decodePng(PngState& s, DecodedImage& out, std::string& error) {
  if (!createPng(s, error)) return false;
  if (setjmp(png_jmpbuf(s.png))) {
    png_destroy_read_struct(&s.png, &s.info, nullptr);
    error = s.message;
    return false;
  }
  png_set_read_fn(s.png, &s, readPngBytes);
  png_read_info(s.png, s.info);
  const auto width = png_get_image_width(s.png, s.info);
  const auto height = png_get_image_height(s.png, s.info);
  if (!sizeOk(width, height, error)) {
    png_destroy_read_struct(&s.png, &s.info, nullptr);
    return false;
  }
  const int color = png_get_color_type(s.png, s.info);
  const int depth = png_get_bit_depth(s.png, s.info);
  if (depth == 16) png_set_strip_16(s.png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s.png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(s.png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(s.png);
  if ((color & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(s.png);
  png_set_interlace_handling(s.png);
  png_read_update_info(s.png, s.info);
  out.width = static_cast<int>(width);
  out.height = static_cast<int>(height);
  const size_t stride = static_cast<size_t>(width) * 3;
  if (png_get_rowbytes(s.png, s.info) != stride) png_error(s.png, "unexpected row size after conversion to RGB");
  out.rgb.resize(stride * height);
  s.rows.resize(height);
  for (size_t y = 0; y < height; ++y) s.rows[y] = out.rgb.data() + y * stride;
  png_read_image(s.png, s.rows.data());
  // No png_read_end: like PIL, a file cut after its pixel data still decodes.
  png_destroy_read_struct(&s.png, &s.info, nullptr);
  return true;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

bool probeImageFile(const std::filesystem::path& path, ImageInfo& info, std::string& error) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    error = fmt::format("cannot open: {}", std::strerror(errno));
    return false;
  }
  uint8_t head[8] = {};
  const size_t n = std::fread(head, 1, sizeof(head), file.get());
  std::rewind(file.get());
  switch (sniff(head, n)) {
    case Format::kJpeg: {
      auto state = std::make_unique<JpegProbe>();
      return probeJpeg(file.get(), *state, info, error);
    }
    case Format::kPng: {
      auto state = std::make_unique<PngState>();
      return probePng(file.get(), *state, info, error);
    }
    case Format::kUnknown:
      break;
  }
  error = n == 0 ? "empty file" : "not a JPEG or PNG image (unrecognised signature)";
  return false;
}

bool decodeImage(std::span<const uint8_t> bytes, DecodedImage& out, std::string& error) {
  switch (sniff(bytes.data(), bytes.size())) {
    case Format::kJpeg: {
      auto state = std::make_unique<JpegDecode>();
      return decodeJpeg(bytes, *state, out, error);
    }
    case Format::kPng: {
      auto state = std::make_unique<PngState>();
      state->bytes = bytes;
      return decodePng(*state, out, error);
    }
    case Format::kUnknown:
      break;
  }
  error = bytes.empty() ? "empty file" : "not a JPEG or PNG image (unrecognised signature)";
  return false;
}

bool decodeImageFile(const std::filesystem::path& path, DecodedImage& out, std::string& error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    error = "cannot open for reading";
    return false;
  }
  const std::streamoff size = in.tellg();
  if (size < 0 || size > (std::streamoff{1} << 31)) {
    error = fmt::format("cannot read its size, or it is over 2 GiB ({} bytes)", size);
    return false;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (in.gcount() != size) {
    error = "read failed";
    return false;
  }
  return decodeImage(bytes, out, error);
}

}  // namespace tandem::data
