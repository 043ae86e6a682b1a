// The CLI's promises about arguments and exit codes: 0 success, 2 bad input,
// 1 anything else, whatever layer (CLI11, validation, launch) noticed it.
#include <gtest/gtest.h>

#include <chrono>

#include "support/process.hpp"

namespace tandem {
namespace {
using testing::runTandem;

void expectBadInput(const std::string& args, const std::vector<std::string>& needles) {
  auto run = runTandem(args, std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
  for (const auto& needle : needles) {
    EXPECT_NE(run.output.find(needle), std::string::npos) << args << ": no '" << needle << "' in\n" << run.output;
  }
}

TEST(CliArgs, EveryParseErrorExitsTwo) {
  expectBadInput("train --batch-size abc", {"--batch-size"});
  expectBadInput("train --batch-size", {"--batch-size"});
  expectBadInput("train --progress sometimes", {"--progress"});
  expectBadInput("train --epochs 2 --max-steps 3", {"--max-steps", "--epochs"});
  expectBadInput("launch --workers two", {"--workers"});
  expectBadInput("bench allreduce --workers x", {"--workers"});
  expectBadInput("nosuchcommand", {"nosuchcommand"});
}

TEST(CliArgs, UnknownFlagsAreNamedInOrderWithASuggestion) {
  auto run = runTandem("train --bach-size 3 --zzzz-qqqq 1", std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  const size_t first = run.output.find("unknown flag --bach-size (did you mean --batch-size?)");
  const size_t second = run.output.find("unknown flag --zzzz-qqqq");
  ASSERT_NE(first, std::string::npos) << run.output;
  ASSERT_NE(second, std::string::npos) << run.output;
  EXPECT_LT(first, second);
  EXPECT_EQ(run.output.find("--zzzz-qqqq (did you mean"), std::string::npos) << run.output;
  expectBadInput("launch --wrkers 2 -- --max-steps 1", {"--wrkers", "did you mean --workers?"});
  expectBadInput("bench allreduce --sizez 4K", {"--sizez", "did you mean --sizes?"});
}

TEST(CliArgs, DashAndUnderscoreSpellingsAreOneFlag) {
  // Both reach the same option, so both get its own range check.
  expectBadInput("train --batch_size 0", {"--batch-size", "positive"});
  expectBadInput("train --batch-size 0", {"--batch-size", "positive"});
  expectBadInput("train --worker-hosts 127.0.0.1:1 --job-name worker --task-index 5", {"--task_index 5", "range"});
  expectBadInput("train --worker_hosts=127.0.0.1:1 --job_name=worker --task_index=5", {"--task_index 5", "range"});
}

TEST(CliArgs, NoArgumentsPrintsUsageAndVersionNamesTheLibraries) {
  auto usage = runTandem("", std::chrono::seconds(60));
  EXPECT_EQ(usage.exit_code, 0) << usage.output;
  for (const char* needle : {"Usage", "train", "launch", "eval"}) {
    EXPECT_NE(usage.output.find(needle), std::string::npos) << needle << "\n" << usage.output;
  }
  auto version = runTandem("--version", std::chrono::seconds(60));
  EXPECT_EQ(version.exit_code, 0) << version.output;
  for (const char* needle : {"tandem 0.", "LibTorch 2.", "\nCUDA ", "\nBLAS ", "Gloo: LibTorch's", "ZeroMQ 4."}) {
    EXPECT_NE(version.output.find(needle), std::string::npos) << needle << "\n" << version.output;
  }
}

// The binary's wiring of the refusal; TrainFlags.AFlagThatWouldChangeNothing...
// covers the cases in-process.
TEST(CliArgs, FlagsThatWouldBeIgnoredAreErrors) {
  expectBadInput("train --worker_hosts 127.0.0.1:1 --ps_hosts 127.0.0.1:2 --job_name worker --task_index 0 "
                 "--verify-replicas-every 1",
                 {"--verify-replicas-every", "all-reduce"});
}

TEST(CliArgs, UnresolvableHostIsBadInputNamingHostAndFlag) {
  // In a fresh network namespace the lookup fails at once, and no query
  // leaves this machine.
  if (testing::runCommand("unshare --net true").exit_code != 0) GTEST_SKIP() << "unshare --net is not permitted";
  const auto started = std::chrono::steady_clock::now();
  auto run = testing::runCommand(std::string("unshare --net ") + TANDEM_BINARY +
                                     " train --max-steps 1 --worker_hosts 127.0.0.1:7001,no-such-host.invalid:7002 "
                                     "--job_name worker --task_index 0",
                                 std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--worker_hosts: host 'no-such-host.invalid' does not resolve"), std::string::npos)
      << run.output;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
}

TEST(CliArgs, LaunchExitsTwoWhenEveryFailedTaskHadBadInput) {
  // Each worker rejects the model name itself; launch keeps their verdict.
  auto run = runTandem("launch --workers 2 -- --model no-such-model --max-steps 1", std::chrono::seconds(120));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("no-such-model"), std::string::npos) << run.output;
}

TEST(CliArgs, LaunchAcceptsTorchrunHabits) {
  // --nproc-per-node is --workers, and a redundant `train` after -- is dropped:
  // both reach the workers, which then reject the bad model as usual.
  auto run = runTandem("launch --nproc-per-node 1 -- train --model no-such-model --max-steps 1",
                       std::chrono::seconds(120));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("launch: 1 worker(s)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("no-such-model"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace tandem
