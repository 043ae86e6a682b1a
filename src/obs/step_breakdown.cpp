#include "obs/step_breakdown.hpp"

namespace tandem::obs {

std::string_view phaseName(Phase phase) {
  switch (phase) {
    case Phase::kInputWait: return "input_wait";
    case Phase::kForwardBackward: return "forward_backward";
    case Phase::kExposedComm: return "exposed_comm";
    case Phase::kWaitWorkers: return "wait_workers";
    case Phase::kUpdate: return "update";
    case Phase::kCount: break;
  }
  return "unknown";
}

double StepBreakdown::meanSeconds(Phase phase) const {
  return steps_ == 0 ? 0.0 : total(phase) / static_cast<double>(steps_);
}

double StepBreakdown::meanStepSeconds() const {
  double sum = 0;
  for (double t : totals_) sum += t;
  return steps_ == 0 ? 0.0 : sum / static_cast<double>(steps_);
}

nlohmann::json StepBreakdown::toJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    auto phase = static_cast<Phase>(i);
    j[std::string(phaseName(phase))] = meanSeconds(phase);
  }
  j["step"] = meanStepSeconds();
  return j;
}

void StepBreakdown::reset() {
  totals_.fill(0.0);
  steps_ = 0;
}

}  // namespace tandem::obs
