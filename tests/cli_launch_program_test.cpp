// `tandem launch -- PROGRAM`: any program runs as the job's workers, told its
// place the way tandem::init() and torchrun-style code read it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>
#include <set>

#include "support/process.hpp"

namespace tandem {
namespace {
using testing::runTandem;
using testing::TempDir;

TEST(LaunchProgram, EveryWorkerIsToldItsPlace) {
  // The program's own flags pass through untouched (no '_' -> '-').
  auto run = runTandem(
      "launch --workers 3 -- /bin/sh -c 'echo \"seen rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
      "master=$MASTER_ADDR:$MASTER_PORT threads=$OMP_NUM_THREADS args=$0 tf=$TF_CONFIG\"' --batch_size");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::set<std::string> ranks;
  std::set<std::string> masters;
  std::regex line(R"(seen rank=(\d) world=3 local=(\d)/3 master=([0-9.]+:\d+) threads=(\d+) args=--batch_size tf=(.*))");
  std::istringstream lines(run.output);
  for (std::string text; std::getline(lines, text);) {
    std::smatch m;
    if (!std::regex_search(text, m, line)) continue;
    ranks.insert(m[1]);
    EXPECT_EQ(m[1], m[2]) << text;
    masters.insert(m[3]);
    EXPECT_GE(std::stoi(m[4]), 1) << text;
    const auto tf = nlohmann::json::parse(m[5].str());
    EXPECT_EQ(tf["cluster"]["worker"].size(), 3u) << text;
    EXPECT_FALSE(tf["cluster"].contains("ps")) << text;
    EXPECT_EQ(tf["task"]["type"], "worker") << text;
    EXPECT_EQ(std::to_string(tf["task"]["index"].get<int>()), m[1].str()) << text;
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2"})) << run.output;
  EXPECT_EQ(masters.size(), 1u) << run.output;  // one rendezvous address for all
}

TEST(LaunchProgram, AFailingProgramFailsTheJobNamingTheWorker) {
  auto run = runTandem("launch --workers 2 -- /bin/sh -c 'if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 30'",
                       std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("worker 1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("status 3"), std::string::npos) << run.output;
}

TEST(LaunchProgram, AMissingProgramIsBadInput) {
  auto run = runTandem("launch --workers 2 -- no-such-trainer-anywhere --epochs 1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("'no-such-trainer-anywhere' not found in PATH"), std::string::npos) << run.output;
  TempDir dir;
  auto not_executable = runTandem("launch --workers 1 -- " + dir.str());
  EXPECT_EQ(not_executable.exit_code, 2) << not_executable.output;
  EXPECT_NE(not_executable.output.find("is not an executable file"), std::string::npos) << not_executable.output;
}

}  // namespace
}  // namespace tandem
