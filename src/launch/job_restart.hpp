#pragma once
// `tandem launch --max-restarts N`: when a task fails, the whole job is
// stopped and started again, and every task continues from the run
// directory's newest checkpoint (torchrun's gang restart). A restarted
// parameter server gets its shard and optimizer slots back from that
// checkpoint through the chief, and every worker rolls back to the same
// step. Torch-free; not thread-safe.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::launch {

// The `tandem train` arguments of a restarted job. When OUT holds a
// checkpoint, --overwrite and --resume go (either would start elsewhere than
// OUT's newest checkpoint); otherwise the arguments stay as given, so the job
// starts the way it first did.
std::vector<std::string> restartArguments(const std::vector<std::string>& args, bool out_has_checkpoint);

// One restart, as `tandem launch` reports it and appends it to
// OUT/restarts.jsonl.
struct RestartRecord {
  int restart = 0;                     // 1 for the first
  int max_restarts = 0;                // 0: a task that restarted itself (train --restart-wait)
  std::string failure;                 // the failed task, described
  std::string replaced;                // an elastic job's task started again alone ("worker 2"); "" for the job
  std::optional<int64_t> resume_step;  // the newest checkpoint's step; nullopt: none, from the start
  std::optional<int64_t> last_step;    // the latest step any worker reported before the failure
  // When launch saw the failure: Unix seconds, as the trainers' records in restarts.jsonl.
  double time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

  // Updates made after the checkpoint and lost with the failure (async:
  // other workers' too); nullopt when either step is unknown.
  std::optional<int64_t> lostUpdates() const;
  nlohmann::json toJson() const;
  // "restart 1 of 2: ps 0 (pid 9) was killed by SIGKILL; every task
  // continues from the checkpoint at step 40 (17 update(s) since it are lost)",
  // or for a replacement "...; the job goes on and a new worker 2 joins it"
  std::string describe() const;
};

// A parameter server lost while every chunk it held went on at its other
// replica (--ps-replicas 2): nothing is rolled back and no update is lost.
// `last_step`: the latest step any worker reported before.
nlohmann::json replicaLossRecord(const std::string& failure, std::optional<int64_t> last_step);

// Appends `record` as one JSON line to `path`, creating the file (and its
// directory) if needed. Throws Error naming the file if it cannot.
void appendRestartRecord(const std::string& path, const RestartRecord& record);
void appendRestartRecord(const std::string& path, const nlohmann::json& record);

}  // namespace tandem::launch
