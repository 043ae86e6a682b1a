#include "collective/comm_thread.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "core/error.hpp"
#include "core/patient_wait.hpp"

namespace tandem::collective {

// Shared between the queue entry and every copy of the handle, so a handle
// stays valid after the CommThread that produced it is gone.
struct CommHandle::State {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

void CommHandle::wait(Deadline deadline, const std::string& what) const {
  if (!state_) return;  // a default handle stands for no job: nothing to wait for
  // The budget is reported as it stood when the wait began: that is what the
  // caller granted this job, and it reads better than "within 0s".
  const auto budget = std::chrono::round<std::chrono::milliseconds>(deadline.at() - Clock::now());
  const double budget_s = static_cast<double>(std::max<int64_t>(budget.count(), 0)) / 1000.0;
  std::unique_lock lock(state_->mutex);
  if (!waitWithStallWarnings(state_->cv, lock, deadline, [&] { return state_->done; }, [&] { return what; })) {
    if (stopRequested()) throw Interrupted(fmt::format("stopped by a signal while waiting for {}", what));
    throw PeerError(fmt::format("{} did not finish within {:g}s", what, budget_s));
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

bool CommHandle::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CommHandle CommThread::submit(std::function<void()> job) {
  CommHandle handle;
  handle.state_ = std::make_shared<CommHandle::State>();
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(job), handle);
  }
  cv_.notify_one();
  return handle;
}

void CommThread::loop() {
  for (;;) {
    std::pair<std::function<void()>, CommHandle> entry;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      // Drain before stopping: a queued job may be a collective that peers
      // are already blocked in, and dropping it would stall them.
      if (queue_.empty()) return;
      entry = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      entry.first();
    } catch (...) {
      error = std::current_exception();
    }
    // The job object may hold buffers or references the caller frees right
    // after wait() returns, so release it before signalling completion.
    entry.first = nullptr;
    auto& state = *entry.second.state_;
    {
      std::lock_guard lock(state.mutex);
      state.done = true;
      state.error = std::move(error);
    }
    state.cv.notify_all();
  }
}

}  // namespace tandem::collective
