#pragma once
// Runs the real `tandem` binary for end-to-end tests.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

namespace tandem::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline ProcessResult runCommand(const std::string& command) {
  ProcessResult result;
  std::string full = command + " 2>&1";
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline ProcessResult runTandem(const std::string& args) {
  return runCommand(std::string(TANDEM_BINARY) + " " + args);
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

inline bool fashionMnistInstalled() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

}  // namespace tandem::testing
