#include "obs/timeline.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <fstream>

#include "core/error.hpp"
#include "obs/metrics_writer.hpp"

namespace tandem::obs {
namespace {

nlohmann::json metadata(const char* kind, int pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", kind}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

void writeEvents(const std::filesystem::path& path, nlohmann::json events) {
  writeFileAtomically(path, nlohmann::json({{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}).dump() + "\n");
}

}  // namespace

Timeline::Timeline(std::filesystem::path path, std::string task, int task_id, const std::array<std::string, 3>& lanes)
    : path_(std::move(path)), task_id_(task_id) {
  events_.push_back(metadata("process_name", task_id_, 0, task));
  for (int lane = 0; lane < 3; ++lane) events_.push_back(metadata("thread_name", task_id_, lane, lanes[static_cast<size_t>(lane)]));
}

Timeline::~Timeline() {
  try {
    write();
  } catch (const std::exception&) {
    // A timeline is a diagnostic: failing to write it does not fail the run.
  }
}

int64_t Timeline::nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Timeline::span(std::string_view name, Lane lane, int64_t start_us, int64_t end_us, nlohmann::json args) {
  nlohmann::json e = {{"ph", "X"}, {"name", name}, {"pid", task_id_}, {"tid", static_cast<int>(lane)},
                      {"ts", start_us}, {"dur", std::max<int64_t>(0, end_us - start_us)}};
  if (!args.is_null()) e["args"] = std::move(args);
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(e));
}

void Timeline::write() {
  std::lock_guard lock(mutex_);
  if (written_) return;
  written_ = true;
  writeEvents(path_, events_);
}


namespace {

void appendEventsOf(const std::filesystem::path& path, nlohmann::json& events) {
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not a timeline: {}", path.string(), e.what()));
  }
  if (!j.contains("traceEvents") || !j["traceEvents"].is_array()) {
    throw InputError(fmt::format("{}: not a timeline (no traceEvents)", path.string()));
  }
  for (auto& e : j["traceEvents"]) events.push_back(std::move(e));
}

}  // namespace

void mergeTimelines(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& output) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& path : inputs) appendEventsOf(path, events);
  writeEvents(output, std::move(events));
}

void appendToTimeline(const std::filesystem::path& path, const nlohmann::json& events) {
  nlohmann::json all = nlohmann::json::array();
  appendEventsOf(path, all);
  for (const auto& e : events) all.push_back(e);
  writeEvents(path, std::move(all));
}

}  // namespace tandem::obs
