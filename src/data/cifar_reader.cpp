#include "data/cifar_reader.hpp"

#include <fstream>

#include "core/error.hpp"

namespace tandem::data {
namespace {

// Far above CIFAR's 30-150 MB files; a bigger "batch" is almost surely the wrong file.
constexpr uintmax_t kMaxFileBytes = uintmax_t{1} << 32;

}  // namespace

LabelledImages readCifarFile(const std::filesystem::path& path, const CifarFormat& format) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(fmt::format("{}: missing file (or not a regular file)", path.string()));
  }
  uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec) throw InputError(fmt::format("{}: cannot read size: {}", path.string(), ec.message()));
  const int64_t record = format.record_bytes();
  if (bytes == 0 || bytes % static_cast<uintmax_t>(record) != 0 || bytes > kMaxFileBytes) {
    throw InputError(fmt::format(
        "{}: size {} bytes is not a positive multiple of the {}-byte {} record "
        "(truncated file, trailing data, or not {} binary)",
        path.string(), bytes, record, format.name, format.name));
  }
  const int64_t n = static_cast<int64_t>(bytes / static_cast<uintmax_t>(record));
  auto records = torch::empty({n, record}, torch::kByte);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(records.data_ptr<uint8_t>()), static_cast<std::streamsize>(bytes));
  if (!in || in.gcount() != static_cast<std::streamsize>(bytes)) {
    throw InputError(fmt::format("{}: truncated: read {} of {} bytes", path.string(), in.gcount(),
                                 bytes));
  }
  LabelledImages out;
  out.labels = records.select(1, format.label_offset).to(torch::kLong);
  out.images = records.narrow(1, format.label_bytes, kCifarPixelBytes)
                   .reshape({n, kCifarChannels, kCifarSide, kCifarSide})
                   .contiguous();
  return out;
}

std::filesystem::path findCifarDir(const std::filesystem::path& dir, const CifarFormat& format) {
  std::error_code ec;
  if (std::filesystem::exists(dir / format.test_file, ec)) return dir;
  auto sub = dir / format.subdir;
  if (std::filesystem::exists(sub / format.test_file, ec)) return sub;
  throw InputError(fmt::format("{}: missing file (also looked for {})",
                               (dir / format.test_file).string(),
                               (sub / format.test_file).string()));
}

}  // namespace tandem::data
