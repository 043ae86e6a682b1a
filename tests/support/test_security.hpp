#pragma once
// The job security the socket tests run as: the user's secret (or
// $TANDEM_SECRET_FILE), resolved once per test process, as a job's tasks
// default to. Library code takes the security as an argument; a test that
// needs another job's passes its own.
#include "net/job_security.hpp"

namespace tandem::testing {

inline const net::JobSecurity& testSecurity() {
  static const net::JobSecurity security = net::resolveJobSecurity("", false, captureEnvironment());
  return security;
}

}  // namespace tandem::testing
