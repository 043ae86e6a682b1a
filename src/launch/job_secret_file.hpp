#pragma once
// A fresh secret for one launched job (net/job_security.hpp): written to a
// private directory (mode 0700, the file 0600) and named to the tasks by
// TANDEM_SECRET_FILE, so that not even the user's other jobs can reach this
// one's servers. Removed when the launch ends.
#include <filesystem>
#include <string>
#include <vector>

#include "core/environment.hpp"
#include "net/job_security.hpp"

namespace tandem::launch {

class JobSecretFile {
 public:
  // Does nothing when the tasks' arguments already choose (--secret-file,
  // --insecure) or `env` sets TANDEM_SECRET_FILE: the user's choice stands.
  JobSecretFile(const std::vector<std::string>& task_args, const Environment& env);
  // The keys a launcher sent to a task on another host, held here as
  // privately for as long.
  explicit JobSecretFile(const net::JobKeys& keys);
  ~JobSecretFile();
  JobSecretFile(const JobSecretFile&) = delete;
  JobSecretFile& operator=(const JobSecretFile&) = delete;

  // The file, or empty when the user chose.
  const std::filesystem::path& path() const { return path_; }
  // `env` with the file named to the tasks (unchanged when the user chose).
  Environment forTasks(Environment env) const;
  // The file's keys, for tasks on other hosts.
  net::JobKeys keys() const;

 private:
  void makePrivateDirectory();
  std::filesystem::path dir_, path_;
};

}  // namespace tandem::launch
