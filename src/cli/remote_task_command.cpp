// `tandem remote-task -- ARGV`: the agent `tandem launch --hosts` runs on
// another host over ssh (launch/remote_task.hpp). Not for users: hidden.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "launch/remote_task.hpp"

namespace tandem::cli {

Command addRemoteTaskCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("remote-task", "the agent of a task launch started over ssh");
  cmd->group("");  // hidden from --help
  auto argv = std::make_shared<std::vector<std::string>>();
  auto grace_s = std::make_shared<double>(10);
  cmd->add_option("--grace", *grace_s, "seconds between SIGTERM and SIGKILL once the launcher is gone");
  cmd->add_option("command", *argv, "after --: the task's command line")->required();
  return {cmd, [argv, grace_s](const Environment& env) {
            return launch::runRemoteAgent(*argv, env,
                                          std::chrono::milliseconds(static_cast<int64_t>(*grace_s * 1000)));
          }};
}

}  // namespace tandem::cli
