#pragma once
// The parameter-server side of the APIs' DistributedOptimizer: the
// trainer's strategy for the job's servers (train::makeStrategy: gradients
// every step, or DiLoCo's rounds) over the user's module, through the
// Strategy interface, with the optimizer's settings read from the user's
// optimizer and its learning rate sent whenever it changes.
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "core/training_mode.hpp"
#include "optim/kernels.hpp"

namespace tandem::api {

struct PsOptimizerOptions {
  Mode mode = Mode::PsSync;  // a server mode (usesServers)
  int staleness = 1;  // ps-ssp: steps a worker may run ahead of the slowest
  int backward_passes_per_step = 1;
  optim::OptimizerSettings optimizer;  // what the servers run
  double lr = 0.01;                 // the rate of the first step
  // The training options the caller gives by keyword (train/option_keywords.hpp):
  // ps_chunk_mb, push_bits, and DiLoCo's local_steps (> 0: the caller's
  // optimizer steps locally and every local_steps steps the change goes to
  // the servers' outer optimizer) and outer_*. Unnamed ones keep the
  // declaration's default; all are checked as `tandem train` checks them.
  nlohmann::json keywords = nlohmann::json::object();
};

class PsOptimizer {
 public:
  // Joins the job's servers: the chief initialises them with `module`'s
  // parameters, every other worker pulls those. Throws InputError when the
  // job has no servers or the options are bad.
  PsOptimizer(torch::nn::Module& module, const PsOptimizerOptions& options);
  ~PsOptimizer();
  PsOptimizer(const PsOptimizer&) = delete;
  PsOptimizer& operator=(const PsOptimizer&) = delete;

  // The rate the next update applies with (DiLoCo: the caller's own, so
  // nothing is sent).
  void setLearningRate(double lr);
  // After the update's backward passes: pushes what is left, waits for the
  // step's agreement and installs the pulled parameters in the module.
  // DiLoCo: after the caller's optimizer step; exchanges at a round's end.
  void step();
  // Unsets the gradients; they are not needed, the servers hold the update.
  void zeroGrad();
  // Async and SSP: the chief waits for every other worker's last update and
  // pulls the final parameters. Then each worker says goodbye. Idempotent.
  // DiLoCo: ends a partial last round first.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The servers' optimizer for a torch::optim optimizer (SGD, Adam, AdamW,
// RMSprop), read from its first parameter group; InputError for another
// optimizer, options the servers cannot run (dampening, amsgrad), or
// groups whose options differ.
optim::OptimizerSettings serverOptimizerOf(torch::optim::Optimizer& optimizer);
double learningRateOf(torch::optim::Optimizer& optimizer);

}  // namespace tandem::api
