#include "obs/metrics_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.hpp"

namespace tandem::obs {
namespace fs = std::filesystem;

namespace {
double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

MetricsWriter::MetricsWriter(const fs::path& run_dir) : run_dir_(run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) throw InputError(fmt::format("--out {}: cannot create directory: {}", run_dir_.string(), ec.message()));
  auto path = run_dir_ / "metrics.jsonl";
  metrics_.open(path, std::ios::out | std::ios::app);
  if (!metrics_) throw InputError(fmt::format("{}: cannot open for writing", path.string()));
  events_.emplace(run_dir_, unixSeconds());
}

void MetricsWriter::append(const nlohmann::json& record) {
  nlohmann::json stamped = record;
  if (stamped.is_object() && !stamped.contains("time")) stamped["time"] = unixSeconds();
  metrics_ << stamped.dump() << '\n';
  metrics_.flush();
  if (!stamped.is_object()) return;
  const auto step = stamped.find("step");
  if (step == stamped.end() || !step->is_number_integer()) return;
  const auto scalars = tensorBoardScalars(stamped);
  if (scalars.empty()) return;
  const auto time = stamped.find("time");
  const double wall_time = time->is_number() ? time->get<double>() : unixSeconds();
  events_->writeScalars(step->get<int64_t>(), wall_time, scalars);
}

std::vector<Scalar> tensorBoardScalars(const nlohmann::json& record) {
  std::vector<Scalar> out;
  if (!record.is_object()) return out;
  const auto type = record.find("type");
  const std::string prefix = type != record.end() && type->is_string() ? type->get<std::string>() + "/" : "";
  for (const auto& [key, value] : record.items()) {
    if (key == "step" || key == "time") continue;
    if (value.is_number()) {
      out.push_back({prefix + key, value.get<float>()});
    } else if (value.is_object()) {
      // Phase means are one chart group across train records.
      const bool phases = key == "step_breakdown";
      for (const auto& [sub, number] : value.items()) {
        if (!number.is_number()) continue;
        std::string tag = phases ? "step_time/" + (sub == "step" ? std::string("total") : sub) : prefix + key + "/" + sub;
        out.push_back({std::move(tag), number.get<float>()});
      }
    }
  }
  return out;
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

void appendJsonLine(const fs::path& path, const nlohmann::json& record) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::app);
  out << record.dump() << "\n";  // one write of a short line: appends from several processes stay whole
  out.flush();
  if (!out) throw Error(fmt::format("{}: cannot append a record", path.string()));
}

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
