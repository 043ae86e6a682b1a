#include "launch/output_relay.hpp"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace tandem::launch {
namespace {

// A line longer than this is relayed in pieces rather than buffered forever
// (progress bars that only ever write '\r' would otherwise grow without bound).
constexpr size_t kMaxLine = 64 * 1024;
// After a child is reaped its pipe is drained only up to this much: a
// grandchild that inherited the pipe may keep writing indefinitely.
constexpr size_t kMaxDrain = 1024 * 1024;

void closeRelayFd(int& fd) {
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

}  // namespace

namespace output_relay_detail {

struct Stream {
  size_t id = 0;
  std::string name;
  std::string label;
  int fd = -1;
  std::string partial;
  bool drain = false;
};

}  // namespace output_relay_detail
using output_relay_detail::Stream;

struct OutputRelay::Impl {
  int output_fd;
  size_t next_stream_id = 0;

  // Inbox of the relay thread; everything else about streams is owned by it.
  std::mutex mu;
  std::vector<std::unique_ptr<Stream>> pending;
  std::set<size_t> drain_requests;
  bool stop = false;

  int wake[2] = {-1, -1};
  std::thread relay;

  explicit Impl(int fd) : output_fd(fd) {}

  void poke() {
    char byte = 1;
    ssize_t ignored = ::write(wake[1], &byte, 1);  // a full pipe already means "wake up"
    (void)ignored;
  }

  void ensureRelay() {
    if (relay.joinable()) return;
    if (wake[0] < 0) {
      if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        throw Error(fmt::format("process group: cannot create the relay wake-up pipe: {}", std::strerror(errno)));
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
    out_buffer += s.label;
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
    closeRelayFd(s.fd);
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

OutputRelay::OutputRelay(int output_fd) : impl_(std::make_unique<Impl>(output_fd)) {}

OutputRelay::~OutputRelay() {
  impl_->stopRelay();
  closeRelayFd(impl_->wake[0]);
  closeRelayFd(impl_->wake[1]);
}

void OutputRelay::setLineHook(LineHook hook) { impl_->line_hook = std::move(hook); }

void OutputRelay::setStatusLine(std::function<std::string()> status) { impl_->status_line = std::move(status); }

size_t OutputRelay::add(std::string name, std::string label, int fd) {
  try {
    impl_->ensureRelay();
  } catch (...) {
    ::close(fd);
    throw;
  }
  auto stream = std::make_unique<Stream>();
  stream->id = impl_->next_stream_id++;
  stream->name = std::move(name);
  stream->label = std::move(label);
  stream->fd = fd;
  const size_t id = stream->id;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->pending.push_back(std::move(stream));
  }
  impl_->poke();
  return id;
}

void OutputRelay::drain(size_t id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->drain_requests.insert(id);
  }
  impl_->poke();
}

void OutputRelay::stop() { impl_->stopRelay(); }

}  // namespace tandem::launch
