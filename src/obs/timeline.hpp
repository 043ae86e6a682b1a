#pragma once
// --timeline: a Chrome-trace / Perfetto JSON file per task ("traceEvents" of
// complete spans), on the system clock in microseconds, so that the files of
// every task on a host line up when merged (launch writes OUT/timeline.json).
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::obs {

// Thread lanes within a task's process. A server names them its own way
// (requests, apply, pulls).
enum class Lane : int { kLoop = 0, kComm = 1, kBackward = 2 };

class Timeline {
 public:
  // Writes `path` on write() or destruction; `task` names the process
  // ("worker 0"), `lanes` its three lanes.
  Timeline(std::filesystem::path path, std::string task, int task_id,
           const std::array<std::string, 3>& lanes = {"training loop", "communication", "emulated layers"});
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  static int64_t nowUs();
  // A closed span [start_us, end_us]. Thread-safe.
  void span(std::string_view name, Lane lane, int64_t start_us, int64_t end_us, nlohmann::json args = nullptr);
  void write();

 private:
  std::filesystem::path path_;
  int task_id_;
  std::mutex mutex_;
  std::vector<nlohmann::json> events_;
  bool written_ = false;
};

// Merges per-task timeline files into one; every span keeps its task's
// process. Throws InputError naming a file that is not a timeline.
void mergeTimelines(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& output);

// Adds `events` (a JSON array of trace events) to the timeline at `path`.
// Throws InputError as mergeTimelines does.
void appendToTimeline(const std::filesystem::path& path, const nlohmann::json& events);

}  // namespace tandem::obs
