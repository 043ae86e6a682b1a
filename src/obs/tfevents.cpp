#include "obs/tfevents.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "obs/tensorboard_event.pb.h"

namespace tandem::obs {
namespace fs = std::filesystem;

namespace {
constexpr std::array<uint32_t, 256> makeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kCrc32cTable = makeCrc32cTable();

void appendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::string hostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string name(buf);
  // A '/' would make the name a path.
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}
}  // namespace

uint32_t crc32c(std::string_view bytes, uint32_t crc) {
  crc = ~crc;
  for (unsigned char b : bytes) crc = kCrc32cTable[(crc ^ b) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t maskedCrc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  appendLittleEndian(out, data.size(), 8);
  appendLittleEndian(out, maskedCrc32c(out), 4);
  out.append(data);
  appendLittleEndian(out, maskedCrc32c(data), 4);
  return out;
}

EventFileWriter::EventFileWriter(const fs::path& dir, double wall_time) {
  const auto seconds = static_cast<long long>(std::floor(wall_time));
  const std::string stem = fmt::format("events.out.tfevents.{}.{}.{}.", seconds, hostName(), ::getpid());
  // O_EXCL with a counter: two writers in one process (tests, several
  // trainers) or a quick restart never share a file.
  for (int n = 0; fd_ < 0; ++n) {
    path_ = dir / (stem + std::to_string(n));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0 && (errno != EEXIST || n >= 1000)) {
      throw InputError(fmt::format("{}: cannot create TensorBoard event file: {}", path_.string(), std::strerror(errno)));
    }
  }
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_file_version("brain.Event:2");
  std::string data;
  event.SerializeToString(&data);
  try {
    writeRecord(data);
  } catch (const Error& e) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(e.what());
  }
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

EventFileWriter::EventFileWriter(EventFileWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

EventFileWriter& EventFileWriter::operator=(EventFileWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void EventFileWriter::writeScalars(int64_t step, double wall_time, std::span<const Scalar> scalars) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& s : scalars) {
    auto* value = summary->add_value();
    value->set_tag(s.tag);
    value->set_simple_value(s.value);
  }
  std::string data;
  if (!event.SerializeToString(&data)) throw Error(fmt::format("{}: cannot serialize event at step {}", path_.string(), step));
  writeRecord(data);
}

void EventFileWriter::writeRecord(std::string_view data) {
  if (fd_ < 0) throw Error(fmt::format("{}: event file is closed", path_.string()));
  const std::string record = tfRecord(data);
  std::string_view left = record;
  while (!left.empty()) {
    ssize_t n = ::write(fd_, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(fmt::format("{}: write failed: {}", path_.string(), n < 0 ? std::strerror(errno) : "no progress"));
    left.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace tandem::obs
