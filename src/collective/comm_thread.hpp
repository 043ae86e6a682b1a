#pragma once
// A background thread that runs communication jobs in submission order, so
// collectives overlap the caller's compute. Failures are kept as an
// exception_ptr and rethrown to whoever waits on the job.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/deadline.hpp"

namespace tandem::collective {

class CommHandle {
 public:
  CommHandle() = default;
  // Blocks until the job ran. Rethrows its exception; throws PeerError
  // naming `what` if the deadline passes first. Thread-safe.
  void wait(Deadline deadline, const std::string& what) const;
  bool done() const;

 private:
  friend class CommThread;
  struct State;
  std::shared_ptr<State> state_;
};

// Thread-safe submit; jobs run one at a time, in order.
class CommThread {
 public:
  CommThread();
  ~CommThread();  // runs the queued jobs, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  CommHandle submit(std::function<void()> job);

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, CommHandle>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::collective
