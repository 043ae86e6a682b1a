#include "core/patient_wait.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <thread>

namespace tandem {
namespace {

// Captures what the default logger writes while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(PatientWait, WarnsNamingWhatItWaitsForLongBeforeGivingUp) {
  CapturedLog log;
  std::mutex mutex;
  std::condition_variable cv;
  std::unique_lock lock(mutex);
  const auto started = Clock::now();
  const bool ready = waitWithStallWarnings(
      cv, lock, Deadline::after(std::chrono::milliseconds(450)), [] { return false; },
      [] { return std::string("ps 1 to answer the end of step 7"); },
      StallWarning{std::chrono::milliseconds(100), std::chrono::milliseconds(150)});
  EXPECT_FALSE(ready);
  EXPECT_GE(Clock::now() - started, std::chrono::milliseconds(450));
  // At 100, 250 and 400 ms.
  EXPECT_EQ(count(log.text(), "still waiting for ps 1 to answer the end of step 7 after"), 3u) << log.text();
  EXPECT_NE(log.text().find("gives up in"), std::string::npos) << log.text();
}

TEST(PatientWait, AWaitThatEndsInTimeSaysNothing) {
  CapturedLog log;
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::thread notifier([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard guard(mutex);
    done = true;
    cv.notify_all();
  });
  std::unique_lock lock(mutex);
  EXPECT_TRUE(waitWithStallWarnings(cv, lock, Deadline::after(std::chrono::seconds(5)), [&] { return done; },
                                    [] { return std::string("x"); }));
  lock.unlock();
  notifier.join();
  EXPECT_EQ(log.text(), "");
}

TEST(PatientWait, FormatsDurations) {
  EXPECT_EQ(formatDuration(std::chrono::milliseconds(850)), "850ms");
  EXPECT_EQ(formatDuration(std::chrono::milliseconds(3000)), "3s");
  EXPECT_EQ(formatDuration(std::chrono::milliseconds(2500)), "2.5s");
}

}  // namespace
}  // namespace tandem
