// `tandem coordinator`: a job's store served by a process of its own, for
// jobs that another launcher starts (mpirun, srun, a Kubernetes pod each).
// Its workers name it with --coordinator HOST:PORT --external-coordinator,
// so that a live job (--min-workers) goes on through worker 0's death, as
// under tandem launch, which serves the store itself.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "cluster/coordinator.hpp"
#include "net/job_security.hpp"

namespace tandem::cli {
namespace {

std::atomic<int> g_stop_signal{0};

void onCoordinatorSignal(int signal) { g_stop_signal.store(signal); }

struct CoordinatorOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string secret_file;
  bool insecure = false;
};

int runCoordinator(const CoordinatorOptions& o, const Environment& env) {
  const net::JobSecurity security = net::resolveJobSecurity(o.secret_file, o.insecure, env);
  for (int signal : {SIGINT, SIGTERM}) std::signal(signal, onCoordinatorSignal);
  cluster::CoordinatorServer server(o.host, o.port, security);
  const std::string address = fmt::format("{}:{}", o.host, server.port());
  std::fprintf(stderr,
               "coordinator: serving the job's store at %s; start each task with --coordinator %s "
               "--external-coordinator (and --min-workers N for a job that outlives worker 0); stop with SIGTERM\n",
               address.c_str(), address.c_str());
  while (g_stop_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::fprintf(stderr, "coordinator: stopped by signal %d\n", g_stop_signal.load());
  return 0;
}

}  // namespace

Command addCoordinatorCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("coordinator",
                                 "serve a job's store in a process of its own, for jobs started by mpirun, srun or "
                                 "a pod each: a live job (--min-workers) then outlives worker 0");
  auto options = std::make_shared<CoordinatorOptions>();
  cmd->add_option("--host", options->host, "this machine's name or address to serve on")->capture_default_str();
  cmd->add_option("--port", options->port, "the port (0: a free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--secret-file", options->secret_file,
                  "the job secret its tasks hold (default: $TANDEM_SECRET_FILE, else ~/.config/tandem/job-secret)");
  cmd->add_flag("--insecure", options->insecure, "no job secret: anyone who reaches the port may use the store");
  cmd->footer("Example:\n  tandem coordinator --host node0 --port 29400 &\n"
              "  srun tandem train --model cnn --coordinator node0:29400 --external-coordinator --min-workers 3");
  return {cmd, [options](const Environment& env) { return runCoordinator(*options, env); }};
}

}  // namespace tandem::cli
