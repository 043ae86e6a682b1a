#include "train/run_start.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "obs/metrics_writer.hpp"
#include "train/checkpoint.hpp"
#include "train/run_directory.hpp"

namespace tandem::train {
namespace fs = std::filesystem;

namespace {

// A run recorded before a field existed had its default.
nlohmann::json withDefaults(const nlohmann::json& stored) { return toJson(trainConfigFromJson(stored)); }

}  // namespace

RunDirectoryPlan planRunDirectory(const TrainConfig& c, bool owner) {
  const fs::path out(c.out_dir);
  if (c.overwrite) {
    // Servers clear their own ps/ps-N, which they may be writing already.
    if (owner) clearRunDirectory(out, "ps");
    return {c.resume_from, false};
  }
  const bool explicit_resume = !c.resume_from.empty();
  auto refuse = [&](const FieldDifference& d) {
    throw InputError(fmt::format("--out {}: holds a different run: {} differs: stored {}, this run {}; pass "
                                 "--overwrite to replace it, or choose another --out",
                                 c.out_dir, d.field, d.stored, d.current));
  };
  std::error_code ec;
  if (!explicit_resume) {
    if (auto latest = latestCheckpoint(out)) {
      const LoadedCheckpoint checkpoint(*latest);
      if (auto d = firstTrajectoryDifference(withDefaults(checkpoint.meta().config), toJson(c), false)) refuse(*d);
      return {latest->string(), true};
    }
  }
  if (fs::exists(runRecordPath(out), ec)) {
    nlohmann::json stored;
    try {
      stored = nlohmann::json::parse(std::ifstream(runRecordPath(out)));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: not a run record ({}); pass --overwrite to replace the run directory",
                                   runRecordPath(out).string(), e.what()));
    }
    if (auto d = firstTrajectoryDifference(withDefaults(stored), toJson(c), explicit_resume)) refuse(*d);
  }
  return {c.resume_from, false};
}

void claimRunDirectory(const TrainConfig& c, const RunDirectoryPlan& plan, int64_t start_step) {
  const fs::path out(c.out_dir);
  pruneCheckpoints(out, start_step, 0);
  if (!plan.automatic) {
    std::error_code ec;
    if (fs::path(plan.resume_from).lexically_normal() != (out / "checkpoint.ckpt").lexically_normal()) {
      fs::remove(out / "checkpoint.ckpt", ec);
    }
    fs::remove(out / "checkpoints" / "latest", ec);
  }
  fs::create_directories(out);
  obs::writeFileAtomically(runRecordPath(out), toJson(c).dump(2) + "\n");
}

}  // namespace tandem::train
