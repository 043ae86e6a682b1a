// Tandem under the launchers users already have: real torchrun (the venv's
// torch) and real Open MPI mpirun, each against `tandem launch`.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::readFile;
using testing::runCommand;
using testing::runTandem;
using testing::TempDir;

// No --threads: each process must find its share of the cores by itself.
std::string args(const std::string& out) {
  std::string a = testing::syntheticTrainArgs("mlp", 16, out, "--optimizer sgd --lr 0.01 --momentum 0.9 --max-steps 20");
  const std::string threads = "--threads 1 ";
  a.erase(a.find(threads), threads.size());
  return a;
}

int expectedThreads(int local_processes) {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_processes);
}

nlohmann::json summaryOf(const TempDir& dir, const std::string& run) {
  return nlohmann::json::parse(readFile(dir.path() / run / "summary.json"));
}

class Launchers : public ::testing::Test {
 protected:
  void SetUp() override {
    auto launched = runTandem("launch --workers 2 -- " + args(dir_.str("launch")), std::chrono::seconds(300));
    ASSERT_EQ(launched.exit_code, 0) << launched.output;
    auto summary = summaryOf(dir_, "launch");
    EXPECT_EQ(summary["local_processes"], 2);
    EXPECT_EQ(summary["threads"], expectedThreads(2));
  }
  TempDir dir_;
};

TEST_F(Launchers, TorchrunMatchesLaunch) {
  ASSERT_TRUE(std::filesystem::exists(TANDEM_TORCHRUN)) << TANDEM_TORCHRUN << " is missing: run scripts/setup.sh";
  const int port = testing::freePort();
  // The venv's torchrun, as its users start it: no 1.13-era --redirects/--tee.
  auto run = runCommand(fmt::format("{} --nproc-per-node 2 --master-port {} --no-python {} train {}", TANDEM_TORCHRUN,
                                    port, TANDEM_BINARY, args(dir_.str("torchrun"))),
                        std::chrono::seconds(300));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  testing::expectSameParameters(dir_.str("launch/checkpoint.ckpt"), dir_.str("torchrun/checkpoint.ckpt"));
  auto summary = summaryOf(dir_, "torchrun");
  EXPECT_EQ(summary["workers"], 2);
  EXPECT_EQ(summary["local_processes"], 2);
  EXPECT_EQ(summary["threads"], 1);  // torchrun sets OMP_NUM_THREADS=1, which we honour
}

TEST_F(Launchers, MpirunMatchesLaunch) {
  ASSERT_TRUE(std::filesystem::exists("/usr/bin/mpirun")) << "mpirun is missing: run scripts/setup.sh";
  const int port = testing::freePort();
  auto run = runCommand(fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                    "/usr/bin/mpirun --oversubscribe -np 2 {} train {} --coordinator 127.0.0.1:{}",
                                    TANDEM_BINARY, args(dir_.str("mpirun")), port),
                        std::chrono::seconds(300));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  testing::expectSameParameters(dir_.str("launch/checkpoint.ckpt"), dir_.str("mpirun/checkpoint.ckpt"));
  auto summary = summaryOf(dir_, "mpirun");
  EXPECT_EQ(summary["workers"], 2);
  EXPECT_EQ(summary["local_processes"], 2);
  EXPECT_EQ(summary["threads"], expectedThreads(2));
}

TEST(LauncherEnvironment, LocalWorldSizePicksTheThreadShareAndAWorldOfOneNeedsNoCoordinator) {
  TempDir dir;
  // RANK/WORLD_SIZE of one, no MASTER_ADDR: a standalone run, sized by LOCAL_WORLD_SIZE.
  auto run = runCommand(fmt::format("env -u OMP_NUM_THREADS RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=2 {} train {}",
                                    TANDEM_BINARY, args(dir.str("one"))),
                        std::chrono::seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto summary = summaryOf(dir, "one");
  EXPECT_EQ(summary["local_processes"], 2);
  EXPECT_EQ(summary["threads"], expectedThreads(2));
  EXPECT_EQ(summary["workers"], 1);
  // OMP_NUM_THREADS wins over the share, --threads over both.
  auto omp = runCommand(fmt::format("OMP_NUM_THREADS=3 LOCAL_WORLD_SIZE=2 {} train {}", TANDEM_BINARY,
                                    args(dir.str("omp"))),
                        std::chrono::seconds(120));
  ASSERT_EQ(omp.exit_code, 0) << omp.output;
  EXPECT_EQ(summaryOf(dir, "omp")["threads"], 3);
  if (std::thread::hardware_concurrency() < 6) {
    EXPECT_NE(omp.output.find("oversubscribed"), std::string::npos) << omp.output;
  }
  auto flag = runCommand(fmt::format("OMP_NUM_THREADS=3 {} train {} --threads 2", TANDEM_BINARY, args(dir.str("flag"))),
                         std::chrono::seconds(120));
  ASSERT_EQ(flag.exit_code, 0) << flag.output;
  EXPECT_EQ(summaryOf(dir, "flag")["threads"], 2);
}

}  // namespace
}  // namespace tandem
