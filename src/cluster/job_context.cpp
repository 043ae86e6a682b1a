#include "cluster/job_context.hpp"

#include "core/error.hpp"

namespace tandem::cluster {

JobContext::JobContext(Environment env) : environment_(std::move(env)) {
  readRestartEnvironment(environment_, start_);
}

JobContext::JobContext(net::JobSecurity security) : security_(std::move(security)) {}

const net::JobSecurity& JobContext::security() const {
  if (!security_) throw Error("the job's security was never resolved: its entry point must resolve it before opening sockets");
  return *security_;
}

}  // namespace tandem::cluster
