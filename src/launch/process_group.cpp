#include "launch/process_group.hpp"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "launch/output_relay.hpp"

namespace tandem::launch {
namespace {

constexpr std::chrono::milliseconds kReapInterval{10};

const char* signalName(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    default: return nullptr;
  }
}

std::string errnoText(int err) { return std::strerror(err); }

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Async-signal-safe pieces for the forked child, which may not allocate.
void childWrite(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void childWriteInt(int value) {
  char digits[16];
  int n = 0;
  unsigned v = value < 0 ? 0u : static_cast<unsigned>(value);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && n < 15);
  char out[16];
  for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  out[n] = '\0';
  childWrite(out);
}

// Points fd `target` at `fd` so that it survives exec.
void childRedirect(int fd, int target) {
  if (fd == target) {
    ::fcntl(target, F_SETFD, 0);  // pipe2's O_CLOEXEC would close it at exec
  } else {
    ::dup2(fd, target);
  }
}

// Descriptors opened elsewhere in this process without O_CLOEXEC (sockets,
// other children's pipes) must not leak into a child: a leaked write end
// would keep another child's relay from ever seeing EOF, a leaked listening
// socket would keep its port busy after we exit.
void childCloseInheritedFds() {
#ifdef SYS_close_range
  constexpr unsigned kCloseRangeCloexec = 1U << 2;
  ::syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec);  // best effort: old kernels lack it
#endif
}

}  // namespace

// Named, not anonymous: ProcessGroup::Impl holds them, and GCC warns when a
// class with linkage has members of internal types (-Wsubobject-linkage).
namespace process_group_detail {

struct Child {
  ChildSpec spec;  // its name, and what starts it again
  pid_t pid = 0;
  bool running = true;
  size_t stream_id = 0;
  int control_fd = -1;  // a remote child's stdin: signals travel as lines on it
};

}  // namespace process_group_detail
using process_group_detail::Child;

std::string ChildExit::describe() const {
  if (signaled) {
    const char* sig_name = signalName(signal);
    if (sig_name != nullptr) return fmt::format("{} (pid {}) was killed by signal {} ({})", name, pid, signal, sig_name);
    return fmt::format("{} (pid {}) was killed by signal {}", name, pid, signal);
  }
  return fmt::format("{} (pid {}) exited with status {}", name, pid, exit_code);
}

struct ProcessGroup::Impl {
  Environment environment;
  bool prefix_output;
  std::vector<Child> children;
  OutputRelay relay;

  Impl(Environment env, bool prefix, int fd) : environment(std::move(env)), prefix_output(prefix), relay(fd) {}

  // A remote child hears every signal but SIGKILL as a line on its control
  // socket (its agent there forwards it); SIGKILL ends the local end (ssh),
  // and the agent stops the task when the connection drops.
  static void deliver(const Child& c, int signal) {
    if (c.control_fd < 0 || signal == SIGKILL) {
      ::kill(c.pid, signal);
      return;
    }
    const std::string line = fmt::format("signal {}\n", signal);
    // A gone agent is reaped soon enough: no SIGPIPE, no retry.
    ssize_t ignored = ::send(c.control_fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }
};

ProcessGroup::ProcessGroup(Environment environment, bool prefix_output, int output_fd)
    : impl_(std::make_unique<Impl>(std::move(environment), prefix_output, output_fd)) {}

ProcessGroup::~ProcessGroup() {
  for (auto& c : impl_->children) {
    if (!c.running) continue;
    ::kill(c.pid, SIGKILL);
    while (::waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    c.running = false;
  }
  for (auto& c : impl_->children) closeFd(c.control_fd);
  impl_->relay.stop();
}

void ProcessGroup::setLineHook(LineHook hook) { impl_->relay.setLineHook(std::move(hook)); }

void ProcessGroup::setStatusLine(std::function<std::string()> status) {
  impl_->relay.setStatusLine(std::move(status));
}

void ProcessGroup::start(const ChildSpec& child) {
  if (child.argv.empty()) throw Error(fmt::format("cannot start {}: empty command line", child.name));

  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed (the relay thread may hold the
  // allocator's lock at the moment we fork).
  Environment child_env = impl_->environment;
  for (const auto& [key, value] : child.extra_env) child_env.insert_or_assign(key, value);
  std::vector<std::string> args = child.argv;
  std::optional<std::string> control;
  if (child.remote) {
    // The task's environment travels in ssh's command; ssh runs in ours.
    Environment remote_env = forwardedEnvironment(child_env);
    for (const auto& name : child.remote->withheld) remote_env.erase(name);
    args = sshCommand(child.remote->ssh, child.remote->host, child.remote->cwd, child.remote->agent, remote_env,
                      child.argv);
    args.front() = findExecutable("ssh", impl_->environment);
    if (args.front().empty()) {
      throw Error(fmt::format("cannot start {} on {}: ssh is not in PATH (Debian: apt install openssh-client)",
                              child.name, child.remote->host));
    }
    child_env = impl_->environment;
    control = child.remote->greeting;
  }
  std::vector<std::string> env_strings = environmentEntries(child_env);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string exec_failed = fmt::format("tandem: cannot start {}: exec '{}' failed: ", child.name, args[0]);

  int out[2] = {-1, -1};
  int control_fds[2] = {-1, -1};
  if (control && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control_fds) != 0) {
    throw Error(fmt::format("cannot start {}: socketpair: {}", child.name, errnoText(errno)));
  }
  if (impl_->prefix_output) {
    if (::pipe2(out, O_CLOEXEC) != 0) {
      closeFd(control_fds[0]);
      closeFd(control_fds[1]);
      throw Error(fmt::format("cannot start {}: pipe: {}", child.name, errnoText(errno)));
    }
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  }

  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    closeFd(out[0]);
    closeFd(out[1]);
    closeFd(control_fds[0]);
    closeFd(control_fds[1]);
    throw Error(fmt::format("cannot start {}: fork: {}", child.name, errnoText(err)));
  }
  if (pid == 0) {
    if (control_fds[0] >= 0) childRedirect(control_fds[0], STDIN_FILENO);
    if (out[1] >= 0) {
      childRedirect(out[1], STDOUT_FILENO);
      childRedirect(out[1], STDERR_FILENO);
      if (out[1] > STDERR_FILENO) ::close(out[1]);
    }
    childCloseInheritedFds();
    // The relay thread's blocked mask must not leak into the child; ours
    // may have SIGINT blocked too, which would make the child deaf to it.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // A terminal's Ctrl-C goes to the foreground process group; keeping the
    // children out of it means they hear a stop once, forwarded by us. If we
    // die without forwarding, the kernel stops them instead of orphaning them.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // we died before prctl took hold
    ::execve(argv[0], argv.data(), envp.data());
    int err = errno;
    childWrite(exec_failed.c_str());
    if (err == ENOENT) {
      childWrite("no such file");
    } else if (err == EACCES) {
      childWrite("permission denied");
    } else if (err == ENOEXEC) {
      childWrite("not an executable format");
    } else {
      childWrite("errno ");
      childWriteInt(err);
    }
    childWrite("\n");
    ::_exit(127);
  }

  Child record;
  record.spec = child;
  record.pid = pid;
  if (control) {
    closeFd(control_fds[0]);
    record.control_fd = control_fds[1];
    // The first words the agent reads; far below a socket's buffer.
    ssize_t ignored = ::send(control_fds[1], control->data(), control->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }
  if (impl_->prefix_output) {
    closeFd(out[1]);
    record.stream_id = impl_->relay.add(child.name, child.label.empty() ? child.name : child.label, out[0]);
  }
  impl_->children.push_back(std::move(record));
}

void ProcessGroup::signalAll(int signal) {
  // Safe against pid reuse: a child is only reaped by wait() or the
  // destructor, so a running entry's pid is still ours (at least a zombie).
  for (const auto& c : impl_->children) {
    if (c.running) Impl::deliver(c, signal);
  }
}

void ProcessGroup::signal(const std::string& name, int signal) {
  for (const auto& c : impl_->children) {
    if (c.running && c.spec.name == name) Impl::deliver(c, signal);
  }
}

std::vector<std::string> ProcessGroup::running() const {
  std::vector<std::string> names;
  for (const auto& c : impl_->children) {
    if (c.running) names.push_back(c.spec.name);
  }
  return names;
}

GroupResult ProcessGroup::wait(std::chrono::milliseconds grace, const std::function<int()>& poll_stop,
                               const std::function<bool(const ChildExit&)>& is_failure,
                               const std::function<bool(const ChildExit&, ChildSpec&)>& replace) {
  GroupResult result;
  std::optional<Clock::time_point> kill_at;
  bool killed = false;
  while (true) {
    bool any_running = false;
    std::vector<ChildSpec> replacements;  // started after the scan: start() grows `children`
    for (auto& c : impl_->children) {
      if (!c.running) continue;
      int status = 0;
      pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) {
        any_running = true;
        continue;
      }
      ChildExit done;
      done.name = c.spec.name;
      done.pid = c.pid;
      if (r < 0) {
        // ECHILD: someone else reaped it (SIGCHLD set to SIG_IGN); its status is lost.
        done.exit_code = -1;
      } else if (WIFSIGNALED(status)) {
        done.signaled = true;
        done.signal = WTERMSIG(status);
      } else {
        done.exit_code = WEXITSTATUS(status);
      }
      c.running = false;
      closeFd(c.control_fd);
      done.stopped_by_group = kill_at.has_value();
      if (impl_->prefix_output) impl_->relay.drain(c.stream_id);
      bool failed = is_failure ? is_failure(done) : (done.signaled || done.exit_code != 0);
      result.exits.push_back(done);
      ChildSpec again = c.spec;
      if (!kill_at && (done.signaled || done.exit_code != 0) && replace && replace(done, again)) {
        replacements.push_back(std::move(again));
        any_running = true;
        continue;
      }
      if (failed) {
        result.ok = false;
        if (result.first_failure.empty()) result.first_failure = done.describe();
        if (!kill_at) {
          kill_at = Clock::now() + grace;
          signalAll(SIGTERM);
        }
      }
    }
    for (const auto& spec : replacements) start(spec);
    if (!any_running) break;
    if (kill_at && !killed && Clock::now() >= *kill_at) {
      signalAll(SIGKILL);
      killed = true;
    }
    if (poll_stop) {
      int sig = poll_stop();
      if (sig > 0) signalAll(sig);
    }
    std::this_thread::sleep_for(kReapInterval);
  }
  // Every line the children wrote is relayed before the caller sees the result.
  impl_->relay.stop();
  return result;
}

std::string findExecutable(const std::string& name, const Environment& env) {
  namespace fs = std::filesystem;
  auto runnable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return runnable(name) ? name : "";
  const std::string path = variableOr(env, "PATH", "/usr/local/bin:/usr/bin:/bin");
  std::string_view dirs = path;
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const fs::path candidate = fs::path(std::string(dirs.substr(0, colon))) / name;
    if (runnable(candidate)) return candidate.string();
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return "";
}

std::string selfExecutable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(fmt::format("cannot read /proc/self/exe: {}", ec.message()));
  return path.string();
}

}  // namespace tandem::launch
