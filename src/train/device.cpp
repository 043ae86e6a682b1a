#include "train/device.hpp"

#include <torch/cuda.h>

#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "train/cuda_library.hpp"

namespace tandem::train {

TrainingDevice chooseTrainingDevice(const std::string& request, const cluster::LocalRank& local,
                                    const Environment& env, bool allow_shared) {
  const cluster::DeviceRequest parsed = cluster::parseDeviceRequest(request);
  if (parsed.kind == cluster::DeviceRequest::Kind::kCpu) return {torch::kCPU, "--device cpu"};
  const CudaLibrary& cuda = loadLibTorchCuda(env);
  const int visible = cuda.state == CudaLibraryState::kLoaded ? static_cast<int>(torch::cuda::device_count()) : 0;
  std::string why = cuda.state == CudaLibraryState::kLoaded ? "CUDA found no device" : "LibTorch CUDA " + describe(cuda);
  if (const auto mask = lookupVariable(env, "CUDA_VISIBLE_DEVICES")) {
    why += fmt::format("; CUDA_VISIBLE_DEVICES={}", *mask);
  }
  const cluster::DevicePlacement placed = cluster::placeDevice(parsed, visible, local, why, allow_shared);
  if (!placed.cuda) return {torch::kCPU, placed.reason};
  return {torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placed.index)), placed.reason};
}

void requireDeterministicKernels() {
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
}

void moveOptimizerState(torch::optim::Optimizer& optimizer, const torch::Device& device) {
  // Through the optimizer's own archive, which knows every optimizer's state
  // layout: written as is, read back onto `device`.
  torch::serialize::OutputArchive out;
  optimizer.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  const std::string payload = bytes.str();
  torch::serialize::InputArchive in;
  in.load_from(payload.data(), payload.size(), device);
  optimizer.load(in);
}

}  // namespace tandem::train
