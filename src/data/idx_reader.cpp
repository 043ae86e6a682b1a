#include "data/idx_reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace tandem::data {
namespace {

// Caps that no real IDX file reaches; they stop a corrupt header from
// describing an absurd shape before the payload length is even checked.
constexpr uint32_t kMaxItems = 1u << 28;
constexpr uint32_t kMaxSide = 1u << 14;
constexpr size_t kReadChunk = size_t{4} << 20;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

GzFile openGz(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(fmt::format("{}: missing file (or not a regular file)", path.string()));
  }
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) throw InputError(fmt::format("{}: cannot open for reading", path.string()));
  gzbuffer(f.get(), 256 * 1024);
  return f;
}

// Reads up to n bytes; returns how many arrived before end of file.
size_t readSome(gzFile_s* f, uint8_t* dst, size_t n, const std::filesystem::path& path) {
  size_t done = 0;
  while (done < n) {
    auto want = static_cast<unsigned>(std::min(n - done, kReadChunk));
    int got = gzread(f, dst + done, want);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw InputError(fmt::format("{}: truncated or corrupt gzip data ({})", path.string(),
                                   msg ? msg : "unknown zlib error"));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

uint32_t bigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxHeader {
  std::vector<uint32_t> dims;
};

IdxHeader readHeader(gzFile_s* f, const std::filesystem::path& path, uint32_t expected_magic,
                     const char* kind) {
  std::array<uint8_t, 4> word{};
  if (readSome(f, word.data(), 4, path) != 4) {
    throw InputError(fmt::format("{}: truncated: file ends inside the 4-byte IDX magic number",
                                 path.string()));
  }
  uint32_t magic = bigEndian32(word.data());
  if (magic != expected_magic) {
    throw InputError(fmt::format(
        "{}: bad magic number 0x{:08x}, expected 0x{:08x} for IDX {} (wrong file or not IDX)",
        path.string(), magic, expected_magic, kind));
  }
  IdxHeader h;
  h.dims.resize(expected_magic & 0xff);
  for (size_t d = 0; d < h.dims.size(); ++d) {
    if (readSome(f, word.data(), 4, path) != 4) {
      throw InputError(fmt::format("{}: truncated: file ends inside the IDX header (dimension {})",
                                   path.string(), d));
    }
    h.dims[d] = bigEndian32(word.data());
  }
  if (h.dims[0] == 0 || h.dims[0] > kMaxItems) {
    throw InputError(fmt::format("{}: header declares {} items; expected 1 to {}", path.string(),
                                 h.dims[0], kMaxItems));
  }
  for (size_t d = 1; d < h.dims.size(); ++d) {
    if (h.dims[d] == 0 || h.dims[d] > kMaxSide) {
      throw InputError(fmt::format("{}: header declares dimension {} of size {}; expected 1 to {}",
                                   path.string(), d, h.dims[d], kMaxSide));
    }
  }
  return h;
}

// Reads exactly `expected` payload bytes. The buffer grows with the data
// that actually arrives, so a lying header costs no more memory than the
// file really holds.
std::shared_ptr<std::vector<uint8_t>> readPayload(gzFile_s* f, const std::filesystem::path& path,
                                                  size_t expected, size_t items,
                                                  const char* item_name) {
  auto buf = std::make_shared<std::vector<uint8_t>>();
  size_t have = 0;
  while (have < expected) {
    size_t target = std::min(expected, std::max(have * 2, have + kReadChunk));
    buf->resize(target);
    size_t got = readSome(f, buf->data() + have, target - have, path);
    have += got;
    if (have < target) break;
  }
  if (have < expected) {
    throw InputError(fmt::format(
        "{}: truncated: header declares {} {} ({} bytes of data) but only {} bytes follow",
        path.string(), items, item_name, expected, have));
  }
  std::array<uint8_t, 64> extra{};
  size_t trailing = readSome(f, extra.data(), extra.size(), path);
  if (trailing > 0) {
    throw InputError(fmt::format(
        "{}: trailing data: {}{} unexpected bytes after the {} {} the header declares",
        path.string(), trailing == extra.size() ? "at least " : "", trailing, items, item_name));
  }
  return buf;
}

torch::Tensor wrap(std::shared_ptr<std::vector<uint8_t>> buf, std::vector<int64_t> sizes) {
  // The tensor keeps the vector alive, so the payload is never copied.
  void* data = buf->data();
  return torch::from_blob(data, sizes, [buf](void*) {}, torch::kByte);
}

}  // namespace

torch::Tensor readIdxImages(const std::filesystem::path& path) {
  GzFile f = openGz(path);
  IdxHeader h = readHeader(f.get(), path, kIdxImagesMagic, "images");
  size_t items = h.dims[0];
  size_t bytes = items * h.dims[1] * h.dims[2];
  auto buf = readPayload(f.get(), path, bytes, items, "images");
  return wrap(std::move(buf), {static_cast<int64_t>(items), 1, h.dims[1], h.dims[2]});
}

torch::Tensor readIdxLabels(const std::filesystem::path& path) {
  GzFile f = openGz(path);
  IdxHeader h = readHeader(f.get(), path, kIdxLabelsMagic, "labels");
  size_t items = h.dims[0];
  auto buf = readPayload(f.get(), path, items, items, "labels");
  return wrap(std::move(buf), {static_cast<int64_t>(items)}).to(torch::kLong);
}

std::filesystem::path findIdxFile(const std::filesystem::path& dir, const std::string& base) {
  std::error_code ec;
  auto gz = dir / (base + ".gz");
  if (std::filesystem::exists(gz, ec)) return gz;
  auto raw = dir / base;
  if (std::filesystem::exists(raw, ec)) return raw;
  throw InputError(fmt::format("{}: missing file (also looked for {})", gz.string(), raw.string()));
}

LabelledImages readIdxPair(const std::filesystem::path& images_path,
                           const std::filesystem::path& labels_path) {
  LabelledImages out{readIdxImages(images_path), readIdxLabels(labels_path)};
  if (out.images.size(0) != out.labels.size(0)) {
    throw InputError(fmt::format("image/label count mismatch: {} has {} images but {} has {} labels",
                                 images_path.string(), out.images.size(0), labels_path.string(),
                                 out.labels.size(0)));
  }
  return out;
}

}  // namespace tandem::data
