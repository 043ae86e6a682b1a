#include "ps/apply_pool.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace tandem::ps {

ApplyPool::ApplyPool(int threads, std::function<void()> on_failure) : on_failure_(std::move(on_failure)) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { loop(); });
}

ApplyPool::~ApplyPool() { finish(); }

void ApplyPool::finish() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void ApplyPool::submit(std::string what, std::function<void()> job, bool awaited) {
  {
    std::lock_guard lock(mutex_);
    const auto place = awaited ? std::find_if(jobs_.begin(), jobs_.end(), [](const Job& j) { return !j.awaited; })
                               : jobs_.end();
    jobs_.insert(place, {std::move(what), std::move(job), awaited});
  }
  cv_.notify_one();
}

void ApplyPool::loop() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    // An exception escaping a thread's function is std::terminate: keep it
    // for the owner, who knows what the failure means for its state.
    std::exception_ptr error;
    try {
      job.run();
    } catch (...) {
      error = std::current_exception();
    }
    if (!error) continue;
    bool first = false;
    {
      std::lock_guard lock(mutex_);
      if (!failure_) {
        failure_ = error;
        failed_job_ = std::move(job.what);
        first = true;
      }
    }
    if (first && on_failure_) on_failure_();
  }
}

void ApplyPool::rethrowFailure() {
  std::exception_ptr failure;
  std::string what;
  {
    std::lock_guard lock(mutex_);
    if (!failure_) return;
    failure = failure_;
    what = failed_job_;
  }
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{} failed: {}", what, e.what()));
  } catch (...) {
    throw Error(fmt::format("{} failed with an exception that is not a std::exception", what));
  }
}

}  // namespace tandem::ps
