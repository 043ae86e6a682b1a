#include "launch/job_restart.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "obs/metrics_writer.hpp"

namespace tandem::launch {

std::vector<std::string> restartArguments(const std::vector<std::string>& args, bool out_has_checkpoint) {
  if (!out_has_checkpoint) return args;
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--overwrite" || a.rfind("--resume=", 0) == 0) continue;
    if (a == "--resume") {
      ++i;  // and its value
      continue;
    }
    kept.push_back(a);
  }
  return kept;
}

std::optional<int64_t> RestartRecord::lostUpdates() const {
  if (!last_step) return std::nullopt;
  return std::max<int64_t>(0, *last_step - resume_step.value_or(0));
}

nlohmann::json RestartRecord::toJson() const {
  auto optional = [](const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  if (!replaced.empty()) {
    // The job went on: no update is undone, nothing rolls back.
    return {{"restart", restart},   {"time", time},         {"max_restarts", max_restarts},
            {"failure", failure},   {"replaced", replaced}, {"last_reported_step", optional(last_step)},
            {"lost_updates", 0},    {"rolled_back", false}};
  }
  return {{"restart", restart},          {"time", time},  {"max_restarts", max_restarts},
          {"failure", failure},          {"resume_step", resume_step.value_or(0)},
          {"from_checkpoint", resume_step.has_value()},
          {"last_reported_step", optional(last_step)},
          {"lost_updates", optional(lostUpdates())}};
}

std::string RestartRecord::describe() const {
  // max_restarts 0: a task that restarted itself (train --restart-wait).
  std::string text = max_restarts > 0 ? fmt::format("restart {} of {}: {}; ", restart, max_restarts, failure)
                                      : fmt::format("restart {}: {}; ", restart, failure);
  if (!replaced.empty()) return text + fmt::format("the job goes on and a new {} joins it", replaced);
  text += resume_step ? fmt::format("every task continues from the checkpoint at step {}", *resume_step)
                      : std::string("no checkpoint yet: the job starts again from step 0");
  if (auto lost = lostUpdates()) text += fmt::format(" ({} update(s) since it are lost)", *lost);
  return text;
}

nlohmann::json replicaLossRecord(const std::string& failure, std::optional<int64_t> last_step) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return {{"kind", "server_replica"},
          {"time", now},
          {"failure", failure},
          {"last_reported_step", last_step ? nlohmann::json(*last_step) : nlohmann::json()},
          {"lost_updates", 0},
          {"rolled_back", false}};
}

void appendRestartRecord(const std::string& path, const RestartRecord& record) {
  appendRestartRecord(path, record.toJson());
}

void appendRestartRecord(const std::string& path, const nlohmann::json& record) { obs::appendJsonLine(path, record); }

}  // namespace tandem::launch
