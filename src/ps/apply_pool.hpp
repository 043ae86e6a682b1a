#pragma once
// A fixed pool of threads running apply jobs for the parameter server. The
// server's I/O thread submits; a job's `done` callback runs on the pool
// thread, so it must only hand results back (the server queues them and
// wakes its I/O thread). Torch-free.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::ps {

class ApplyPool {
 public:
  explicit ApplyPool(int threads);
  ~ApplyPool();  // finishes queued jobs, then joins
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  void submit(std::function<void()> job);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem::ps
