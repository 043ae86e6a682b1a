#include "train/run_placement.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace tandem::train {
namespace {

TrainingDevice placeDeviceOf(const TrainConfig& c, const models::Model& model, bool supplied, bool emulated,
                             const Environment& env) {
  if (emulated) return {torch::kCPU, "--emulate-compute times no real forward"};
  if (supplied) {
    const auto params = model.parameters();
    return {params.empty() ? torch::Device(torch::kCPU) : params.front().device(), "the model's own device"};
  }
  return chooseTrainingDevice(c.device, {c.local_rank, c.local_processes, "this host's workers"}, env,
                              c.allow_shared_gpu);
}

}  // namespace

RunPlacement placeRun(const TrainConfig& c, const models::Model& model, bool supplied, bool emulated,
                      Mode mode, bool strategy_applies_update, const Environment& env) {
  RunPlacement placement{placeDeviceOf(c, model, supplied, emulated, env), c.amp};
  const torch::Device& device = placement.device.device;
  if (c.channels_last && usesServers(mode)) {
    throw InputError(fmt::format("--channels-last: not with parameter servers yet ({} cuts parameters into chunks "
                                 "in their contiguous layout); use it standalone or with all-reduce",
                                 modeName(mode)));
  }
  if (placement.amp == Amp::kFp16 && strategy_applies_update) {
    throw InputError("--amp fp16: its loss scale skips steps on the worker, but parameter servers apply the update; "
                     "use --amp bf16, which needs no loss scale");
  }
  if (placement.amp == Amp::kFp16 && device.is_cpu()) {
    throw InputError("--amp fp16 on the CPU: few CPUs compute in float16, so it runs far slower than float32 (resnet20 "
                     "over 40x here); use --amp bf16, the CPU's mixed precision, or train on a GPU");
  }
  return placement;
}

}  // namespace tandem::train
