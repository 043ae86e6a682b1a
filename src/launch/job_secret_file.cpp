#include "launch/job_secret_file.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "net/job_security.hpp"

namespace tandem::launch {

JobSecretFile::JobSecretFile(const std::vector<std::string>& task_args, const Environment& env) {
  const bool chosen = std::any_of(task_args.begin(), task_args.end(), [](const std::string& a) {
    return a == "--insecure" || a == "--secret-file" || a.starts_with("--secret-file=") || a == "--secret_file" ||
           a.starts_with("--secret_file=");
  });
  if (chosen || !net::secretFileFromEnvironment(env).empty()) return;
  makePrivateDirectory();
  net::writeSecretFile(path_, net::generateJobKeys());
}

JobSecretFile::JobSecretFile(std::string_view secret_line) {
  makePrivateDirectory();
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  std::string text = std::string(secret_line) + "\n";
  const bool written = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!written) throw Error(fmt::format("cannot write the job secret to {}: {}", path_.string(), std::strerror(err)));
}

std::string JobSecretFile::line() const {
  std::ifstream in(path_);
  for (std::string text; std::getline(in, text);) {
    if (!text.empty() && text.front() != '#') return text;  // past the file's comments
  }
  throw Error(fmt::format("cannot read the job secret {}", path_.string()));
}

void JobSecretFile::makePrivateDirectory() {
  const auto base = std::filesystem::temp_directory_path() / "tandem-job-XXXXXX";
  std::string dir = base.string();
  if (::mkdtemp(dir.data()) == nullptr) {  // mode 0700
    throw Error(fmt::format("cannot make a private directory for the job secret at {}: {}", base.string(),
                            std::strerror(errno)));
  }
  dir_ = dir;
  path_ = dir_ / "job-secret";
}

Environment JobSecretFile::forTasks(Environment env) const {
  if (!path_.empty()) env.insert_or_assign(net::kSecretFileVariable, path_.string());
  return env;
}

JobSecretFile::~JobSecretFile() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace tandem::launch
