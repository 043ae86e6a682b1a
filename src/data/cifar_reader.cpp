#include "data/cifar_reader.hpp"

#include <fstream>

#include "core/error.hpp"

namespace tandem::data {
namespace {

// Far above CIFAR-10's 30 MB files; a bigger "batch" is almost surely the wrong file.
constexpr uintmax_t kMaxFileBytes = uintmax_t{1} << 32;

}  // namespace

LabelledImages readCifarFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(fmt::format("{}: missing file (or not a regular file)", path.string()));
  }
  uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec) throw InputError(fmt::format("{}: cannot read size: {}", path.string(), ec.message()));
  if (bytes == 0 || bytes % kCifarRecordBytes != 0 || bytes > kMaxFileBytes) {
    throw InputError(fmt::format(
        "{}: size {} bytes is not a positive multiple of the {}-byte CIFAR-10 record "
        "(truncated file, trailing data, or not CIFAR-10 binary)",
        path.string(), bytes, kCifarRecordBytes));
  }
  const int64_t n = static_cast<int64_t>(bytes / kCifarRecordBytes);
  auto records = torch::empty({n, kCifarRecordBytes}, torch::kByte);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(records.data_ptr<uint8_t>()), static_cast<std::streamsize>(bytes));
  if (!in || in.gcount() != static_cast<std::streamsize>(bytes)) {
    throw InputError(fmt::format("{}: truncated: read {} of {} bytes", path.string(), in.gcount(),
                                 bytes));
  }
  const uint8_t* rec = records.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    uint8_t label = rec[i * kCifarRecordBytes];
    if (label >= kCifarClasses) {
      throw InputError(fmt::format("{}: label {} at index {} is out of range for {} classes",
                                   path.string(), int{label}, i, kCifarClasses));
    }
  }
  LabelledImages out;
  out.labels = records.select(1, 0).to(torch::kLong);
  out.images = records.narrow(1, 1, kCifarRecordBytes - 1)
                   .reshape({n, kCifarChannels, kCifarSide, kCifarSide})
                   .contiguous();
  return out;
}

std::filesystem::path findCifarDir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir / "test_batch.bin", ec)) return dir;
  auto sub = dir / "cifar-10-batches-bin";
  if (std::filesystem::exists(sub / "test_batch.bin", ec)) return sub;
  throw InputError(fmt::format("{}: missing file (also looked for {})",
                               (dir / "test_batch.bin").string(),
                               (sub / "test_batch.bin").string()));
}

}  // namespace tandem::data
