#pragma once
// Runs an administration tool (`ip`, `tc`) and waits for it: the lab builds
// its network with the same commands a user would type, so that what it
// does can be read, and repeated, from the messages it prints.
#include <string>
#include <vector>

#include "core/environment.hpp"

namespace tandem::lab {

struct CommandResult {
  int exit_code = 0;   // 127 when the program could not be started
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (a path: findTool's) with the rest as arguments.
CommandResult runCommand(const std::vector<std::string>& argv);

// As runCommand, but throws Error naming the command and its output when it
// does not exit 0.
void runChecked(const std::vector<std::string>& argv);

// The path of an administration tool: `env`'s PATH, then /usr/sbin and
// /sbin (which a user's PATH may lack). Throws Error naming the tool and
// its package.
std::string findTool(const std::string& name, const Environment& env);

// The tools a lab runs, found once by its entry point.
struct AdminTools {
  std::string ip, tc;
};
AdminTools findAdminTools(const Environment& env);

// "ip netns add x": argv joined for messages.
std::string commandLine(const std::vector<std::string>& argv);

}  // namespace tandem::lab
