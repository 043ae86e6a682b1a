#pragma once
// TF_CONFIG's evaluator task (TFJob's Evaluator replica), run by
// `tandem train` with the job's own flags: it evaluates the chief's newest
// checkpoint in the shared run directory each time one appears, writes
// OUT/evaluator/metrics.jsonl, and ends once the chief's final checkpoint
// is evaluated (train/checkpoint_watch.hpp decides).
#include "train/config.hpp"

namespace tandem::cli {

// 0 once the chief's run is over and its final checkpoint evaluated; 130 on
// a stop signal. Throws InputError for a checkpoint that does not load.
int runEvaluatorTask(const train::TrainConfig& config);

}  // namespace tandem::cli
