// LibTorch's CUDA half is loaded at run time, only where a GPU driver is
// (src/train/cuda_library.hpp); `tandem --version` says what happened.
#include <gtest/gtest.h>

#include <string>

#include "support/gpu_driver.hpp"
#include "support/process.hpp"

namespace tandem {
namespace {

std::string cudaLine(const std::string& env) {
  const auto run = testing::runCommand(env + " " + std::string(TANDEM_BINARY) + " --version");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const auto at = run.output.find("\nCUDA ");
  if (at == std::string::npos) return run.output.find("\nCUDA") == std::string::npos ? "" : run.output;
  return run.output.substr(at + 1, run.output.find('\n', at + 1) - at - 1);
}

TEST(CudaLibrary, LoadsWhereADriverIsAndWhenAskedButNotOtherwise) {
  const std::string by_default = cudaLine("");
  if (by_default.find("(LibTorch's build)") == std::string::npos) GTEST_SKIP() << "a CPU-only LibTorch: " << by_default;
  if (testing::gpuDriverHere()) {
    EXPECT_NE(by_default.find("CUDA library loaded"), std::string::npos) << by_default;
  } else {
    EXPECT_NE(by_default.find("CUDA library not loaded: no GPU driver"), std::string::npos) << by_default;
    EXPECT_NE(by_default.find(" 0 GPU(s) visible"), std::string::npos) << by_default;
  }
  // Without a driver it still loads (its libraries find none until called).
  const std::string always = cudaLine("TANDEM_LIBTORCH_CUDA=always");
  EXPECT_NE(always.find("CUDA library loaded"), std::string::npos) << always;
  const std::string never = cudaLine("TANDEM_LIBTORCH_CUDA=never");
  EXPECT_NE(never.find("CUDA library not loaded: TANDEM_LIBTORCH_CUDA=never"), std::string::npos) << never;
  EXPECT_NE(never.find(" 0 GPU(s) visible"), std::string::npos) << never;
}

// Not loaded, it is not mapped either: a CPU-only process stays small.
// (libtorch_cpu.so itself needs the CUDA runtime and CUPTI, which are small.)
TEST(CudaLibrary, AProcessThatDoesNotLoadItMapsNoCudaLibrary) {
  const auto maps = testing::runCommand("TANDEM_LIBTORCH_CUDA=never LD_DEBUG=files " + std::string(TANDEM_BINARY) +
                                        " --version");
  ASSERT_EQ(maps.exit_code, 0) << maps.output;
  EXPECT_NE(maps.output.find("libtorch_cpu.so"), std::string::npos) << maps.output.substr(0, 2000);
  for (const char* library : {"libtorch_cuda.so", "libc10_cuda.so", "libcublas.so", "libnccl.so", "libcudnn.so"}) {
    EXPECT_EQ(maps.output.find(library), std::string::npos) << library << " was loaded";
  }
  const auto loaded = testing::runCommand("TANDEM_LIBTORCH_CUDA=always LD_DEBUG=files " + std::string(TANDEM_BINARY) +
                                          " --version");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output.substr(0, 2000);
  if (loaded.output.find("CUDA library loaded") != std::string::npos) {
    EXPECT_NE(loaded.output.find("libtorch_cuda.so"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem
