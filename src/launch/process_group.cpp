#include "launch/process_group.hpp"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"

namespace tandem::launch {
namespace {

constexpr std::chrono::milliseconds kReapInterval{10};
// A line longer than this is relayed in pieces rather than buffered forever
// (progress bars that only ever write '\r' would otherwise grow without bound).
constexpr size_t kMaxLine = 64 * 1024;
// After a child is reaped its pipe is drained only up to this much: a
// grandchild that inherited the pipe may keep writing indefinitely.
constexpr size_t kMaxDrain = 1024 * 1024;

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

// Writes everything or gives up on a broken destination; never raises SIGPIPE
// because the relay thread blocks it.
bool writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
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

struct Stream {
  size_t id = 0;
  std::string name;
  int fd = -1;
  std::string partial;
  bool drain = false;
};

struct Child {
  ChildSpec spec;  // its name, and what starts it again
  pid_t pid = 0;
  bool running = true;
  size_t stream_id = 0;
};

}  // namespace process_group_detail
using process_group_detail::Child;
using process_group_detail::Stream;

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
  int output_fd;
  std::vector<Child> children;
  size_t next_stream_id = 0;

  // Inbox of the relay thread; everything else about streams is owned by it,
  // so that a slow stdout stalls only the relay, never wait()'s reaping.
  std::mutex mu;
  std::vector<std::unique_ptr<Stream>> pending;
  std::set<size_t> drain_requests;
  bool stop = false;

  int wake[2] = {-1, -1};
  std::thread relay;

  Impl(Environment env, bool prefix, int fd) : environment(std::move(env)), prefix_output(prefix), output_fd(fd) {}

  void poke() {
    char byte = 1;
    ssize_t ignored = ::write(wake[1], &byte, 1);  // a full pipe already means "wake up"
    (void)ignored;
  }

  void ensureRelay() {
    if (relay.joinable()) return;
    if (wake[0] < 0) {
      if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        throw Error(fmt::format("process group: cannot create the relay wake-up pipe: {}", errnoText(errno)));
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = false;
    }
    // The relay thread takes no signals: SIGINT/SIGTERM belong to the main
    // loop, and a closed stdout must give EPIPE, not kill the launcher.
    sigset_t all;
    sigset_t old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
      relay = std::thread([this] { relayLoop(); });
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      throw;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }

  void addStream(std::unique_ptr<Stream> stream) {
    {
      std::lock_guard<std::mutex> lock(mu);
      pending.push_back(std::move(stream));
    }
    poke();
  }

  void requestDrain(size_t stream_id) {
    {
      std::lock_guard<std::mutex> lock(mu);
      drain_requests.insert(stream_id);
    }
    poke();
  }

  // Returns once every stream has been drained and closed.
  void stopRelay() {
    if (!relay.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    poke();
    relay.join();
  }

  // --- relay thread only ---
  bool output_broken = false;
  std::string out_buffer;
  LineHook line_hook;
  std::function<std::string()> status_line;
  std::string shown_status;

  void emitLine(const Stream& s, std::string_view line) {
    if (line_hook) {
      if (auto replacement = line_hook(s.name, line)) {
        if (!replacement->empty()) out_buffer += *replacement + '\n';
        return;
      }
    }
    out_buffer += '[';
    out_buffer += s.name;
    out_buffer += "] ";
    out_buffer += line;
    out_buffer += '\n';
  }

  // Writes only whole lines, each write from this one thread, so lines of
  // different children never interleave.
  void flushOutput(bool last = false) {
    const std::string status = status_line && !last ? status_line() : "";
    if (!output_broken && (!out_buffer.empty() || status != shown_status)) {
      // Erase the status line, write the new lines, draw it again below them.
      std::string bytes = shown_status.empty() ? "" : "\r\033[K";
      bytes += out_buffer;
      bytes += status;
      output_broken = !writeAll(output_fd, bytes.data(), bytes.size());
      shown_status = status;
    }
    out_buffer.clear();
  }

  void consume(Stream& s, const char* data, size_t size) {
    s.partial.append(data, size);
    size_t start = 0;
    while (true) {
      size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      emitLine(s, std::string_view(s.partial).substr(start, nl - start));
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (s.partial.size() >= kMaxLine) {
      emitLine(s, s.partial);
      s.partial.clear();
    }
  }

  // Reads what is there; returns false at EOF or on a read error.
  bool readSome(Stream& s, size_t* total = nullptr) {
    char buf[16384];
    while (true) {
      ssize_t n = ::read(s.fd, buf, sizeof buf);
      if (n > 0) {
        consume(s, buf, static_cast<size_t>(n));
        if (total != nullptr) *total += static_cast<size_t>(n);
        return true;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }

  void finish(Stream& s) {
    if (!s.partial.empty()) emitLine(s, s.partial);
    s.partial.clear();
    closeFd(s.fd);
  }

  // The child has been reaped, so everything it wrote is already in the pipe.
  void drainAndFinish(Stream& s) {
    size_t total = 0;
    while (total < kMaxDrain) {
      size_t before = total;
      if (!readSome(s, &total) || total == before) break;
    }
    finish(s);
  }

  void relayLoop() {
    std::vector<std::unique_ptr<Stream>> active;
    std::vector<pollfd> fds;
    while (true) {
      bool stopping = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (auto& s : pending) active.push_back(std::move(s));
        pending.clear();
        for (auto& s : active) {
          if (drain_requests.erase(s->id) > 0) s->drain = true;
        }
        stopping = stop;
        if (stopping) drain_requests.clear();
      }
      for (auto& s : active) {
        if (stopping || s->drain) drainAndFinish(*s);
      }
      std::erase_if(active, [](const auto& s) { return s->fd < 0; });
      flushOutput(stopping && active.empty());
      if (stopping && active.empty()) return;

      fds.clear();
      fds.push_back(pollfd{wake[0], POLLIN, 0});
      for (auto& s : active) fds.push_back(pollfd{s->fd, POLLIN, 0});
      int ready = ::poll(fds.data(), fds.size(), 200);
      if (ready <= 0) continue;
      if (fds[0].revents != 0) {
        char sink[64];
        while (::read(wake[0], sink, sizeof sink) > 0) {
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Stream& s = *active[i - 1];
        if (!readSome(s)) finish(s);
      }
      std::erase_if(active, [](const auto& s) { return s->fd < 0; });
      flushOutput();
    }
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
  impl_->stopRelay();
  closeFd(impl_->wake[0]);
  closeFd(impl_->wake[1]);
}

void ProcessGroup::setLineHook(LineHook hook) { impl_->line_hook = std::move(hook); }

void ProcessGroup::setStatusLine(std::function<std::string()> status) { impl_->status_line = std::move(status); }

void ProcessGroup::start(const ChildSpec& child) {
  if (child.argv.empty()) throw Error(fmt::format("cannot start {}: empty command line", child.name));

  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed (the relay thread may hold the
  // allocator's lock at the moment we fork).
  Environment child_env = impl_->environment;
  for (const auto& [key, value] : child.extra_env) child_env.insert_or_assign(key, value);
  std::vector<std::string> env_strings = environmentEntries(child_env);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = child.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string exec_failed = fmt::format("tandem: cannot start {}: exec '{}' failed: ", child.name, args[0]);

  int out[2] = {-1, -1};
  if (impl_->prefix_output) {
    impl_->ensureRelay();
    if (::pipe2(out, O_CLOEXEC) != 0) {
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
    throw Error(fmt::format("cannot start {}: fork: {}", child.name, errnoText(err)));
  }
  if (pid == 0) {
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
  if (impl_->prefix_output) {
    closeFd(out[1]);
    auto stream = std::make_unique<Stream>();
    stream->id = impl_->next_stream_id++;
    stream->name = child.name;
    stream->fd = out[0];
    record.stream_id = stream->id;
    impl_->addStream(std::move(stream));
  }
  impl_->children.push_back(std::move(record));
}

void ProcessGroup::signalAll(int signal) {
  // Safe against pid reuse: a child is only reaped by wait() or the
  // destructor, so a running entry's pid is still ours (at least a zombie).
  for (const auto& c : impl_->children) {
    if (c.running) ::kill(c.pid, signal);
  }
}

void ProcessGroup::signal(const std::string& name, int signal) {
  for (const auto& c : impl_->children) {
    if (c.running && c.spec.name == name) ::kill(c.pid, signal);
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
      done.stopped_by_group = kill_at.has_value();
      if (impl_->prefix_output) impl_->requestDrain(c.stream_id);
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
  impl_->stopRelay();
  return result;
}

std::string selfExecutable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(fmt::format("cannot read /proc/self/exe: {}", ec.message()));
  return path.string();
}

}  // namespace tandem::launch
