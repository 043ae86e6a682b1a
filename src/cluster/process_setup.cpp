#include "cluster/process_setup.hpp"

#include <fmt/format.h>

#include "cluster/local_address.hpp"
#include "core/error.hpp"

namespace tandem::cluster {

ProcessSetup setUpProcess(const ClusterFlags& flags, int threads, const Environment& env) {
  ProcessSetup setup;
  setup.spec = resolveClusterSpec(flags, env);
  if (setup.spec) requireResolvableHosts(*setup.spec);
  setup.local = findLocalRank(setup.spec, env);
  setup.threads = planHostThreads(threads, env, countLocalProcesses(setup.spec, env));
  return setup;
}

void requireWorkerTask(const ProcessSetup& setup, std::string_view entry) {
  if (!setup.spec || setup.spec->role != Role::kPs) return;
  throw InputError(fmt::format("{}: this process is {} in {}; parameter servers run as `tandem train` tasks "
                               "(tandem launch --ps starts them)",
                               entry, setup.spec->taskName(), setup.spec->source));
}

}  // namespace tandem::cluster
