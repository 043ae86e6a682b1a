#include "cli/restart_in_place.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cluster/job_start.hpp"
#include "core/logging.hpp"
#include "core/stop_request.hpp"
#include "launch/job_restart.hpp"
#include "train/run_directory.hpp"

namespace tandem::cli {
namespace {

std::vector<std::string>& commandLine() {
  static std::vector<std::string> args;
  return args;
}

// Every descriptor but the standard three closes on exec: the new process
// binds this task's ports again.
void closeOnExec() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    if (fd > 2) ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  }
}

}  // namespace

void rememberCommandLine(int argc, char** argv) { commandLine().assign(argv, argv + argc); }

bool mayRestartInPlace(const cluster::ClusterSpec* spec, const train::TrainConfig& config,
                       const cluster::JobStart& start) {
  return spec != nullptr && spec->role == cluster::Role::kWorker && config.distributed.restart_wait_s > 0 &&
         start.training && !stopRequested() && !commandLine().empty();
}

void restartInPlace(const cluster::ClusterSpec& spec, const train::TrainConfig& config,
                    const cluster::JobStart& start, const std::string& failure) {
  const auto checkpoint = train::latestCheckpoint(config.out_dir);
  launch::RestartRecord record;
  record.restart = start.restarts + 1;
  record.failure = failure;
  if (checkpoint) record.resume_step = train::checkpointStep(*checkpoint).value_or(0);
  if (const int64_t steps = start.finished_steps; steps >= 0) record.last_step = steps;
  const double wait = config.distributed.restart_wait_s;
  TANDEM_LOG_WARN("{}: restarting in place ({}); waiting up to {:.0f}s (--restart-wait) for the job's next start",
                  spec.taskName(), record.describe(), wait);
  if (spec.isChief()) {
    try {
      launch::appendRestartRecord((std::filesystem::path(config.out_dir) / "restarts.jsonl").string(), record);
    } catch (const std::exception& e) {
      TANDEM_LOG_WARN("{}", e.what());
    }
  }
  const auto args = launch::restartArguments(commandLine(), checkpoint.has_value());
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::setenv("TANDEM_RESTART", cluster::restartEnvironment(start, wait).c_str(), 1);
  std::fflush(nullptr);
  closeOnExec();
  ::execv("/proc/self/exe", argv.data());
  TANDEM_LOG_ERROR("{}: could not start again in place: {}", spec.taskName(), std::strerror(errno));
}

}  // namespace tandem::cli
