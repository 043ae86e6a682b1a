#include "lab/system_command.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace tandem::lab {

std::string commandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  return line;
}

std::string findTool(const std::string& name, const Environment& env) {
  const std::string dirs = variableOr(env, "PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin";
  for (size_t begin = 0; begin <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string candidate = dirs.substr(begin, end - begin) + "/" + name;
    if (end > begin && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  throw Error(fmt::format("'{}' was not found (Debian package iproute2; scripts/setup.sh installs it)", name));
}

AdminTools findAdminTools(const Environment& env) { return {findTool("ip", env), findTool("tc", env)}; }

CommandResult runCommand(const std::vector<std::string>& argv) {
  if (argv.empty()) throw Error("runCommand: empty command");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  std::vector<char*> args{const_cast<char*>(argv.front().c_str())};
  for (size_t i = 1; i < argv.size(); ++i) args.push_back(const_cast<char*>(argv[i].c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("fork for '{}': {}", commandLine(argv), std::strerror(errno)));
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  CommandResult result;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  while (!result.output.empty() && result.output.back() == '\n') result.output.pop_back();
  return result;
}

void runChecked(const std::vector<std::string>& argv) {
  const CommandResult r = runCommand(argv);
  if (r.exit_code != 0) {
    throw Error(fmt::format("'{}' failed (exit {}): {}", commandLine(argv), r.exit_code, r.output));
  }
}

}  // namespace tandem::lab
