#include "launch/remote_task.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <optional>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "launch/job_secret_file.hpp"
#include "net/job_security.hpp"

namespace tandem::launch {
namespace {

constexpr std::string_view kSecretWord = "secret ";
constexpr std::string_view kStartWord = "start";
constexpr std::string_view kSignalWord = "signal ";

bool assignable(std::string_view name) {
  if (name.empty() || (name.front() >= '0' && name.front() <= '9')) return false;
  for (char c : name) {
    if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

// This login's, not the job's: the remote login sets its own.
bool describesLogin(std::string_view name) {
  for (std::string_view exact : {"HOME", "USER", "LOGNAME", "SHELL", "MAIL", "PWD", "OLDPWD", "SHLVL", "_",
                                 "HOSTNAME", "TERM", "DISPLAY", "LS_COLORS", "TMUX", "TMUX_PANE", "COLUMNS", "LINES"}) {
    if (name == exact) return true;
  }
  for (std::string_view prefix : {"SSH_", "XDG_", "BASH_FUNC_", "DBUS_"}) {
    if (name.starts_with(prefix)) return true;
  }
  return false;
}

std::atomic<int> g_agent_signal{0};
void onAgentSignal(int signal) { g_agent_signal.store(signal); }

// The lines of the agent's stdin, as they arrive.
class ControlReader {
 public:
  // A whole line, or nullopt when none is there yet; `closed` once stdin ended.
  std::optional<std::string> next(bool block) {
    while (true) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      if (closed_) return std::nullopt;
      pollfd p{STDIN_FILENO, POLLIN, 0};
      if (::poll(&p, 1, block ? -1 : 0) <= 0) return std::nullopt;
      char chunk[512];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        closed_ = true;
        continue;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  bool closed() const { return closed_; }

 private:
  std::string buffer_;
  bool closed_ = false;
};

pid_t spawnTask(const std::vector<std::string>& argv, const Environment& env) {
  std::vector<std::string> entries = environmentEntries(env);
  std::vector<char*> envp;
  for (auto& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // The task must not read the control channel.
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw InputError(fmt::format("remote-task: cannot start '{}': {}", argv.front(), std::strerror(rc)));
  return pid;
}

}  // namespace

std::string shellQuote(std::string_view word) {
  const bool plain = !word.empty() && word.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                             "0123456789_-+./:,=@%") == std::string_view::npos;
  if (plain) return std::string(word);
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

Environment forwardedEnvironment(const Environment& env) {
  Environment forwarded;
  for (const auto& [name, value] : env) {
    if (assignable(name) && !describesLogin(name)) forwarded.emplace(name, value);
  }
  return forwarded;
}

std::vector<std::string> sshCommand(const SshOptions& ssh, const std::string& host, const std::string& cwd,
                                    const std::string& self, const Environment& env,
                                    const std::vector<std::string>& argv) {
  // No terminal (the channel carries control lines), and a missing key fails
  // at once instead of waiting at a password prompt no one sees.
  std::vector<std::string> command{"ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"};
  if (ssh.port > 0) {
    command.push_back("-p");
    command.push_back(std::to_string(ssh.port));
  }
  if (!ssh.identity_file.empty()) {
    command.push_back("-i");
    command.push_back(ssh.identity_file);
  }
  for (const auto& option : ssh.options) {
    command.push_back("-o");
    command.push_back(option);
  }
  command.push_back(host);
  std::string remote = fmt::format("cd {} && exec env", shellQuote(cwd));
  for (const auto& [name, value] : env) remote += fmt::format(" {}={}", name, shellQuote(value));
  remote += fmt::format(" {} remote-task --", shellQuote(self));
  for (const auto& arg : argv) remote += " " + shellQuote(arg);
  command.push_back(remote);
  return command;
}

std::string agentGreeting(const std::string& secret_line) {
  std::string greeting;
  if (!secret_line.empty()) greeting = fmt::format("{}{}\n", kSecretWord, secret_line);
  return greeting + std::string(kStartWord) + "\n";
}

int runRemoteAgent(const std::vector<std::string>& argv, const Environment& env, std::chrono::milliseconds grace) {
  if (argv.empty()) throw InputError("remote-task: no command after --");
  ControlReader control;
  std::optional<JobSecretFile> secret;
  for (;;) {
    const std::optional<std::string> line = control.next(/*block=*/true);
    if (!line) {
      std::fprintf(stderr, "remote-task: the launcher's connection closed before '%s' started\n", argv[0].c_str());
      return 1;
    }
    if (*line == kStartWord) break;
    if (!line->starts_with(kSecretWord)) continue;
    const auto keys = net::parseSecretLine(std::string_view(*line).substr(kSecretWord.size()), "the launcher's secret");
    if (!keys) throw InputError("remote-task: the launcher sent a secret that is not a job secret's line");
    secret.emplace(*keys);
  }
  Environment task_env = env;
  if (secret) task_env.insert_or_assign(net::kSecretFileVariable, secret->path().string());
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, onAgentSignal);
  const pid_t pid = spawnTask(argv, task_env);
  std::optional<Clock::time_point> kill_at;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFSIGNALED(status)) {
        const int signal = WTERMSIG(status);
        std::fprintf(stderr, "remote-task: '%s' was killed by signal %d (%s)\n", argv[0].c_str(), signal,
                     ::sigabbrev_np(signal) != nullptr ? ::sigabbrev_np(signal) : "?");
        return 128 + signal;
      }
      return WEXITSTATUS(status);
    }
    if (const int signal = g_agent_signal.exchange(0); signal > 0) ::kill(pid, signal);
    while (const auto line = control.next(/*block=*/false)) {
      if (!line->starts_with(kSignalWord)) continue;
      const int signal = std::atoi(line->c_str() + kSignalWord.size());
      if (signal > 0 && signal < NSIG) ::kill(pid, signal);
    }
    if (control.closed() && !kill_at) {
      std::fprintf(stderr, "remote-task: the launcher's connection closed; stopping '%s'\n", argv[0].c_str());
      ::kill(pid, SIGTERM);
      kill_at = Clock::now() + grace;
    }
    if (kill_at && Clock::now() >= *kill_at) ::kill(pid, SIGKILL);
    pollfd p{STDIN_FILENO, POLLIN, 0};
    ::poll(&p, control.closed() ? 0 : 1, 50);
  }
}

}  // namespace tandem::launch
