#pragma once
// How replicas agree on the update. The trainer calls these at fixed points
// of a step; Standalone does nothing, AllReduce and ParameterServer (later
// issues) move gradients and parameters.
#include <string>

#include "models/registry.hpp"

namespace tandem::train {

// Seconds of a step spent on synchronisation, split by cause.
struct SyncTimes {
  double exposed_comm = 0;  // communication compute did not hide
  double wait_workers = 0;  // waiting for slower peers
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string mode() const = 0;  // "standalone", "allreduce", "ps-sync", ...
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  virtual int serverCount() const { return 0; }
  // Makes every replica start from the same parameters.
  virtual void initialize(models::Model& model) = 0;
  // Called after backward; on return every local gradient holds the value
  // the update must use.
  virtual SyncTimes synchronizeGradients(models::Model& model) = 0;
};

class StandaloneStrategy final : public Strategy {
 public:
  std::string mode() const override { return "standalone"; }
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  void initialize(models::Model&) override {}
  SyncTimes synchronizeGradients(models::Model&) override { return {}; }
};

}  // namespace tandem::train
