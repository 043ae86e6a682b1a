// `tandem secret new FILE`: a job secret for multi-host jobs, to copy to
// every host of the job and name with --secret-file or TANDEM_SECRET_FILE.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "net/job_security.hpp"

namespace tandem::cli {

Command addSecretCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("secret", "job secrets: who may reach a job's servers (docs/security.md)");
  auto* make = cmd->add_subcommand("new", "write a fresh job secret to FILE (mode 0600; refuses to overwrite)");
  cmd->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  make->add_option("FILE", *path, "where to write it")->required();
  return {cmd, [path](const Environment&) {
            net::writeSecretFile(*path, net::generateJobKeys());
            std::fprintf(stderr,
                         "wrote the job secret %s; copy it (mode 0600) to every host of the job and pass "
                         "--secret-file %s, or set TANDEM_SECRET_FILE\n",
                         path->c_str(), path->c_str());
            return 0;
          }};
}

}  // namespace tandem::cli
