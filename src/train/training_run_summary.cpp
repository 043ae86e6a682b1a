// TrainingRun's record of a run: summary.json, every number it reports
// and what each means, and the summary a rerun of a finished run returns.
#include <filesystem>
#include <fstream>

#include "train/mixed_precision.hpp"
#include "train/training_run.hpp"

namespace tandem::train {
namespace fs = std::filesystem;

nlohmann::json TrainingRun::summaryOfFinishedRun() {
  // Still joined and said done, so that peers and servers end at once too.
  strategy_.finish();
  const int rank = strategy_.rank();
  std::error_code ec;
  if (rank == 0 && fs::exists(out_dir_ / "summary.json", ec)) {
    try {
      auto summary = nlohmann::json::parse(std::ifstream(out_dir_ / "summary.json"));
      summary["interrupted"] = false;
      return summary;
    } catch (const nlohmann::json::exception&) {
      // fall through to the minimal summary
    }
  }
  return {{"rank", rank}, {"steps", start_step_}, {"planned_steps", total_steps_}, {"interrupted", false},
          {"trained_steps", 0}};
}

nlohmann::json TrainingRun::summary() {
  const TrainConfig& c = c_;
  const int64_t trained_steps = end_step_ - start_step_;
  const double job_seconds = policy_.shares_job_steps ? loop_seconds_ : train_seconds_;
  const TrainingDevice& device = placement_.device;
  nlohmann::json summary = {
      {"model", c.model},
      {"parameters", param_count_},
      {"dataset", c.dataset.name},
      {"mode", std::string(modeName(strategy_.mode()))},
      {"workers", world_},
      {"rank", strategy_.rank()},
      {"membership_changes", membership_changes_},
      // Worker 0 started again into the running job wrote this summary: its
      // rates and times count from its first step, the step counts are the job's.
      {"chief_returned", chief_returned_},
      {"accumulate", c.accumulate},
      {"servers", strategy_.serverCount()},
      {"batch_size_per_worker", c.batch_size},
      {"global_batch_size", global_batch_},
      {"steps", end_step_},
      {"planned_steps", total_steps_},
      {"interrupted", stop_agreed_},
      {"trained_steps", trained_steps},
      {"epochs", static_cast<double>(end_step_) / static_cast<double>(steps_per_epoch_)},
      {"global_step", end_step_},
      {"worker_steps", local_steps_},
      // The job's samples per second; with shared steps over the training
      // loop's wall time, since the global count includes others' steps.
      {"samples_per_sec", job_seconds > 0 ? static_cast<double>(samples_before_change_ +
                                                                (end_step_ - steps_before_change_) * samples_per_job_step_) /
                                                job_seconds
                                          : 0},
      // The whole process's page faults per step of this worker after the
      // warm-up: a step that maps and unmaps buffers of its own size shows
      // here. null when no step followed the warm-up.
      {"minor_faults_per_step",
       local_steps_ > kWarmupSteps
           ? nlohmann::json(static_cast<double>(steady_faults_) / static_cast<double>(local_steps_ - kWarmupSteps))
           : nlohmann::json()},
      {"worker_samples_per_sec",
       train_seconds_ > 0 ? static_cast<double>(local_steps_ * c.batch_size * c.accumulate) / train_seconds_ : 0},
      {"final_loss", final_loss_},
      // Emulated compute has no real forward: nothing was evaluated.
      {"test_accuracy", emulated_ ? nlohmann::json() : nlohmann::json(last_eval_.accuracy)},
      {"test_loss", emulated_ ? nlohmann::json() : nlohmann::json(last_eval_.loss)},
      {"emulated_compute", emulated_ ? nlohmann::json({{"profile", emulated_->profile().path},
                                                       {"device", emulated_->profile().device},
                                                       {"forward_ms", emulated_->profile().forward_ms},
                                                       {"backward_ms", emulated_->profile().backward_ms}})
                                     : nlohmann::json()},
      {"train_seconds", train_seconds_},
      {"wall_seconds", wall_.elapsed()},
      {"step_breakdown", breakdown_.toJson()},
      {"threads", threads_},
      {"device", device.device.str()},
      {"device_reason", device.reason},
      {"amp", ampSummary(placement_.amp, loss_scale_)},
      {"channels_last", c.channels_last},
      {"deterministic", c.deterministic},
      {"local_processes", c.local_processes},
      {"seed", c.seed},
      {"libtorch", runtime_.libtorch},
      {"cuda", runtime_.cuda_build.empty() ? nlohmann::json(nullptr)
                                           : nlohmann::json({{"build", runtime_.cuda_build},
                                                             {"devices_visible", runtime_.cuda_devices},
                                                             {"library", runtime_.cuda_library}})},
      {"blas", blas_.library},
      {"blas_sgemm_gflops", blas_.sgemm_gflops},
      {"resumed_from", resume_from_.empty() ? nlohmann::json(nullptr) : nlohmann::json(resume_from_)},
      {"strategy", strategy_.summary()},
  };
  writer_->writeSummary(summary);
  return summary;
}

}  // namespace tandem::train
