#pragma once
// Runs the real `tandem` binary for end-to-end tests.
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <mutex>
#include <set>
#include <string>

namespace tandem::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through /bin/sh in its own process group, with stdout and
// stderr captured. A command still running at `timeout` is killed with its
// whole group, and the result says so: a hung child fails its test instead
// of hanging the suite.
inline ProcessResult runCommand(const std::string& command,
                                std::chrono::seconds timeout = std::chrono::seconds(300)) {
  ProcessResult result;
  int out[2];
  if (::pipe(out) != 0) return result;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return result;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    ::close(out[1]);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(out[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  std::array<char, 4096> buffer{};
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{out[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    ssize_t n = ::read(out[0], buffer.data(), buffer.size());
    if (n <= 0) break;  // every writer closed: the command and its children are done with the pipe
    result.output.append(buffer.data(), static_cast<size_t>(n));
  }
  if (timed_out) ::kill(-pid, SIGKILL);
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    result.exit_code = -1;
    result.output += "\n[test harness: killed after " + std::to_string(timeout.count()) + " s]\n";
  } else {
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return result;
}

// SIGKILL to the tasks `job` ("worker" or "ps") of the job writing OUT
// whose index matches `indices` (a pattern: "2", or "(1|3)").
inline void killTasks(const std::string& out, const std::string& job, const std::string& indices) {
  runCommand("pkill -KILL -f -- '--out " + out + " .*--job-name " + job + " --task-index " + indices + "( |$)'");
}

#ifdef TANDEM_BINARY  // absent from the torch-free sanitizer build
inline ProcessResult runTandem(const std::string& args, std::chrono::seconds timeout = std::chrono::seconds(300)) {
  return runCommand(std::string(TANDEM_BINARY) + " " + args, timeout);
}

// Starts `tandem args...` in the background with output to log_path.
inline pid_t spawnTandem(const std::string& args, const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string command = "exec " + std::string(TANDEM_BINARY) + " " + args + " >" + log_path + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}
#endif

// Exit code of `pid`, or -1 if it has not exited within timeout (then it is killed).
inline int waitForExit(pid_t pid, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("tandem-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& child = "") const { return child.empty() ? path_.string() : (path_ / child).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits until `path` exists and is non-empty (true), or `pid` exits or
// `timeout` passes (false): how tests wait for a run to be under way.
inline bool waitForOutput(pid_t pid, const std::filesystem::path& path, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) > 0 && !ec) return true;
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Waits until the file at `path` (a log being written) holds `text` (true),
// or `timeout` passes (false).
inline bool waitForText(const std::filesystem::path& path, const std::string& text, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (readFile(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A loopback TCP port that was free a moment ago, and not handed out
// before by this process: the kernel may give a just-released port again,
// and a test that asks for several needs them distinct.
inline int freePort() {
  static std::mutex mutex;
  static std::set<int> given;
  std::lock_guard lock(mutex);
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    if (port > 0 && given.insert(port).second) return port;
  }
  return -1;
}

inline bool fashionMnistInstalled() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

}  // namespace tandem::testing
