#pragma once
// A fresh secret for one launched job (net/job_security.hpp): written to a
// private directory (mode 0700, the file 0600) and named to the tasks by
// TANDEM_SECRET_FILE, so that not even the user's other jobs can reach this
// one's servers. Removed when the launch ends.
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::launch {

class JobSecretFile {
 public:
  // Does nothing when the tasks' arguments already choose (--secret-file,
  // --insecure) or TANDEM_SECRET_FILE is set: the user's choice stands.
  explicit JobSecretFile(const std::vector<std::string>& task_args);
  ~JobSecretFile();
  JobSecretFile(const JobSecretFile&) = delete;
  JobSecretFile& operator=(const JobSecretFile&) = delete;

  // The file, or empty when the user chose.
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path dir_, path_;
};

}  // namespace tandem::launch
