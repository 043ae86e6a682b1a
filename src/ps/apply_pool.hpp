#pragma once
// A fixed pool of threads running apply jobs for the parameter server. The
// server's I/O thread submits; a job runs on a pool thread, so it must only
// hand results back (the server queues them and wakes its I/O thread).
// Torch-free.
//
// A job that throws must not take the process down with std::terminate: the
// pool keeps the first failure as an exception_ptr together with the job's
// name, tells the owner through `on_failure`, and the owner's thread
// rethrows it (rethrowFailure) as an Error naming the job.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::ps {

class ApplyPool {
 public:
  // `on_failure` runs on the pool thread right after a job threw (e.g. to
  // wake the thread that calls rethrowFailure); it must not throw.
  explicit ApplyPool(int threads, std::function<void()> on_failure = {});
  ~ApplyPool();  // finish()
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  // Queues `job`; `what` names it in the error if it throws ("apply of
  // chunk 3 (update 7)"). An `awaited` job (a pull waits for it) goes ahead
  // of the queued ones nobody waits for (a backup's, with --ps-replicas 2),
  // behind the awaited ones queued before it. Thread-safe.
  void submit(std::string what, std::function<void()> job, bool awaited = true);
  int threads() const { return static_cast<int>(threads_.size()); }

  // Runs the queued jobs, then joins the threads; no job may be submitted
  // after. Idempotent. Owner's thread only.
  void finish();

  // Throws Error "<what> failed: <reason>" for the first job that threw
  // since the pool started; does nothing if none did. Later jobs still run:
  // the owner decides whether state they touched is still usable.
  // Thread-safe.
  void rethrowFailure();

 private:
  struct Job {
    std::string what;
    std::function<void()> run;
    bool awaited = true;
  };
  void loop();

  std::function<void()> on_failure_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::exception_ptr failure_;  // the first job failure; guarded by mutex_
  std::string failed_job_;
  std::vector<std::thread> threads_;
};

}  // namespace tandem::ps
