#include "obs/metrics_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace tandem::obs {
namespace fs = std::filesystem;

MetricsWriter::MetricsWriter(const fs::path& run_dir) : run_dir_(run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) throw InputError(fmt::format("--out {}: cannot create directory: {}", run_dir_.string(), ec.message()));
  auto path = run_dir_ / "metrics.jsonl";
  metrics_.open(path, std::ios::out | std::ios::app);
  if (!metrics_) throw InputError(fmt::format("{}: cannot open for writing", path.string()));
}

void MetricsWriter::append(const nlohmann::json& record) {
  metrics_ << record.dump() << '\n';
  metrics_.flush();
}

void MetricsWriter::writeSummary(const nlohmann::json& summary) const {
  writeFileAtomically(run_dir_ / "summary.json", summary.dump(2) + "\n");
}

namespace {
[[noreturn]] void ioFailure(const fs::path& path, const char* what) {
  throw Error(fmt::format("{}: {} failed: {}", path.string(), what, std::strerror(errno)));
}

void writeAll(int fd, std::string_view bytes, const fs::path& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ioFailure(path, "write");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}
}  // namespace

void writeFileAtomically(const fs::path& path, std::string_view bytes) {
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ioFailure(tmp, "open");
  try {
    writeAll(fd, bytes, tmp);
    if (::fsync(fd) != 0) ioFailure(tmp, "fsync");
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    ioFailure(tmp, "close");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    ioFailure(path, "rename");
  }
  // Make the rename itself durable.
  fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace tandem::obs
