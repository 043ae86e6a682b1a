#pragma once
// What one job's process is, built once by its entry point (`tandem train`,
// tandem::init and tandem::fit, and through them the Python package) and
// passed down: which start of the job it belongs to, and how its sockets
// authenticate. Nothing below the entry points reads either from the
// environment or from a global, so two jobs can share a process (tests do).
#include <optional>
#include <string>

#include "cluster/job_start.hpp"
#include "net/job_security.hpp"

namespace tandem::cluster {

class JobContext {
 public:
  // Keeps the entry point's `env` for the layers below, and reads its
  // TANDEM_RESTART (a task restarted in place). Throws InputError naming
  // the variable when it is malformed.
  explicit JobContext(Environment env);
  // A context that is a job's first start and uses `security`: for a
  // program (or test) that hosts its own job.
  explicit JobContext(net::JobSecurity security);
  JobContext(const JobContext&) = delete;
  JobContext& operator=(const JobContext&) = delete;

  JobStart& start() { return start_; }
  const JobStart& start() const { return start_; }

  // The entry point sets it (net::resolveJobSecurity) once it knows the run
  // is distributed: a standalone run should not create the user's secret.
  void setSecurity(net::JobSecurity security) { security_ = std::move(security); }
  // Error when a caller that opens sockets runs before setSecurity (a bug
  // of the entry point, not of the input).
  const net::JobSecurity& security() const;

  // The environment its entry point captured (empty for a hosted job).
  const Environment& environment() const { return environment_; }

 private:
  Environment environment_;
  JobStart start_;
  std::optional<net::JobSecurity> security_;
};

}  // namespace tandem::cluster
