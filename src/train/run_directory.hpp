#pragma once
// A run directory (--out) as TensorFlow's model_dir: rerunning the same
// command continues from its newest checkpoint, a different run is refused,
// and checkpoints of an abandoned trajectory are never left beside new
// ones. Torch-free: it deals in paths and the run config's JSON.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::train {

// OUT/run.json: the config of the run that owns OUT, written at its start.
std::filesystem::path runRecordPath(const std::filesystem::path& out_dir);

// The newest checkpoint named by OUT/checkpoints/latest, if it names a file
// that exists. Throws InputError if `latest` names a path outside OUT.
std::optional<std::filesystem::path> latestCheckpoint(const std::filesystem::path& out_dir);

// OUT/checkpoints/step-N.ckpt -> N; nullopt for any other name.
std::optional<int64_t> checkpointStep(const std::filesystem::path& file);

// Records `checkpoint` (a file inside OUT) as the newest, atomically.
void recordLatest(const std::filesystem::path& out_dir, const std::filesystem::path& checkpoint);

// Removes OUT/checkpoints/step-N.ckpt files of another trajectory (N >
// `from_step`, when a run restarts at `from_step`) and, when `keep` > 0,
// all but the newest `keep` of the rest.
void pruneCheckpoints(const std::filesystem::path& out_dir, int64_t from_step, int keep);
// The same over DIR/step-N`suffix` files (a DiLoCo worker's inner states).
void pruneStepFiles(const std::filesystem::path& dir, std::string_view suffix, int64_t from_step, int keep);

// --overwrite: removes everything in OUT but the entry named `except`
// (OUT itself stays).
void clearRunDirectory(const std::filesystem::path& out_dir, const std::string& except = "");

struct FieldDifference {
  std::string field;    // "batch_size", "optimizer/momentum"
  std::string stored;   // JSON text of each side
  std::string current;
};

// The first field that decides the trajectory (model, data, batch,
// optimizer, schedule, seed, consistency mode) where the two run configs
// differ; nullopt if none. `allow_lr` lets the base learning rate differ
// (an explicit --resume may change it).
std::optional<FieldDifference> firstTrajectoryDifference(const nlohmann::json& stored, const nlohmann::json& current,
                                                         bool allow_lr);

// A run config with `given` fields (JSON pointers into `flags`) taken from
// `flags` and every other field from `stored`: --resume's defaults.
nlohmann::json mergeGivenFields(const nlohmann::json& stored, const nlohmann::json& flags,
                                const std::vector<std::string>& given);

}  // namespace tandem::train
