#include "cli/evaluator_task.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "core/clock.hpp"
#include "core/logging.hpp"
#include "core/patient_wait.hpp"
#include "core/stop_request.hpp"
#include "obs/metrics_writer.hpp"
#include "train/checkpoint_eval.hpp"
#include "train/checkpoint_watch.hpp"

namespace tandem::cli {
namespace fs = std::filesystem;

int runEvaluatorTask(const train::TrainConfig& config) {
  const fs::path out = config.out_dir;
  const fs::path dir = out / "evaluator";
  train::CheckpointEvaluator evaluator(config.dataset.data_dir, config.eval_batch_size);
  train::CheckpointWatch watch;
  nlohmann::json last;
  TANDEM_LOG_INFO("evaluator: evaluates the chief's newest checkpoint in {} each time one appears, into {}",
                  out.string(), (dir / "metrics.jsonl").string());
  constexpr double kSayWaitingEvery = 60;
  Stopwatch quiet;  // since the last evaluation
  double say_at = kSayWaitingEvery;
  while (!stopRequested()) {
    const train::RunDirectoryView view = train::lookAt(out);
    switch (watch.next(view)) {
      case train::CheckpointWatch::Action::kEvaluate: {
        Stopwatch took;
        nlohmann::json result = evaluator.evaluate(*view.latest);
        result["checkpoint"] = view.latest->lexically_relative(out).string();
        result["type"] = "eval";
        result["seconds"] = took.elapsed();
        fs::create_directories(dir);
        obs::appendJsonLine(dir / "metrics.jsonl", result);
        TANDEM_LOG_INFO("evaluator: step {}: test accuracy {:.4f}, test loss {:.4f} ({}, {:.1f}s)",
                        result["global_step"].get<int64_t>(), result["test_accuracy"].get<double>(),
                        result["test_loss"].get<double>(), result["checkpoint"].get<std::string>(), took.elapsed());
        watch.evaluated(view);
        last = std::move(result);
        quiet = Stopwatch();
        say_at = kSayWaitingEvery;
        break;
      }
      case train::CheckpointWatch::Action::kEnd: {
        const nlohmann::json summary = {{"evaluations", watch.evaluations()}, {"last", last}};
        obs::writeFileAtomically(dir / "summary.json", summary.dump(2) + "\n");
        TANDEM_LOG_INFO("evaluator: the chief's run is over; {} checkpoint(s) evaluated, the last at step {}",
                        watch.evaluations(), last["global_step"].get<int64_t>());
        return 0;
      }
      case train::CheckpointWatch::Action::kWait:
        if (quiet.elapsed() >= say_at) {
          TANDEM_LOG_INFO("evaluator: waiting for the chief's next checkpoint in {} ({} so far, {} since the last)",
                          (out / "checkpoints").string(), watch.evaluations(),
                          formatDuration(std::chrono::milliseconds(static_cast<int64_t>(say_at * 1000))));
          say_at += kSayWaitingEvery;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        break;
    }
  }
  TANDEM_LOG_WARN("evaluator: stopped by a signal after {} evaluation(s)", watch.evaluations());
  return 130;
}

}  // namespace tandem::cli
