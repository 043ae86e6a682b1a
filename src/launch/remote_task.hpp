#pragma once
// A task on another host, started over ssh as horovodrun does, but tied to
// the launcher: the remote command is `tandem remote-task -- ARGV`, an agent
// that reads its stdin, the ssh channel. Launch first writes the job secret
// there (never on a command line), then "start"; later "signal N" lines
// carry the signals ssh would not. When the channel closes (launch or its
// ssh died), the agent stops the task, so no process outlives its job.
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"

namespace tandem::launch {

// horovodrun's --ssh-port and --ssh-identity-file, and ssh's own -o options.
struct SshOptions {
  int port = 0;  // 0: ssh's own choice (its config, else 22)
  std::string identity_file;
  std::vector<std::string> options;  // each passed as -o OPTION
};

// How a ChildSpec runs on another host (launch/process_group.hpp).
struct RemoteTask {
  std::string host;
  SshOptions ssh;
  std::string cwd;    // where the task runs there: launch's own directory, as horovodrun's
  std::string agent;  // the tandem executable there: launch's own path
  std::string greeting;  // agentGreeting()
  std::vector<std::string> withheld;  // variables not sent (a secret file only launch's host holds)
};

// `word` as one word of a POSIX shell: in single quotes unless it needs none.
std::string shellQuote(std::string_view word);

// What a remote task inherits from launch's environment: everything but
// what describes this login (HOME, USER, SSH_*, TERM, ...), and names a
// shell cannot assign.
Environment forwardedEnvironment(const Environment& env);

// The local command line: ssh to `host` (no terminal, no password prompt),
// where a shell changes to `cwd` and runs the agent `self` with `env` and
// `argv`.
std::vector<std::string> sshCommand(const SshOptions& ssh, const std::string& host, const std::string& cwd,
                                    const std::string& self, const Environment& env,
                                    const std::vector<std::string>& argv);

// What launch writes first: the job secret's line (net::secretLine), when
// launch made one, then "start".
std::string agentGreeting(const std::string& secret_line);

// The agent (`tandem remote-task -- ARGV`): reads the greeting from stdin,
// runs ARGV with `env` (and the secret in a private file), forwards
// "signal N" lines and its own SIGINT, SIGTERM and SIGHUP, and, when stdin
// closes, sends SIGTERM, then SIGKILL after `grace`. Returns the status to
// exit with: the task's, or 128 + N when signal N killed it (ssh reports
// no signal).
int runRemoteAgent(const std::vector<std::string>& argv, const Environment& env, std::chrono::milliseconds grace);

}  // namespace tandem::launch
