#include "launch/job_secret_file.hpp"

#include <stdlib.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

JobSecretFile::JobSecretFile(const net::JobKeys& keys) {
  makePrivateDirectory();
  net::writeSecretFile(path_, keys);
}

net::JobKeys JobSecretFile::keys() const { return net::readSecretFile(path_); }

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
