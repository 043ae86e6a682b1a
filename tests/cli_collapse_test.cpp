// A run whose loss collapses stops within a few steps, naming what the
// loss did and the flags to try, instead of running on at chance accuracy;
// --stop-on-collapse off lets it run on until the loss is no number.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::TempDir;

// The mlp on Fashion-MNIST: the loss falls from 2.3 to about 0.6 at lr
// 0.05 in 60 steps; then a rate of 0.3 throws it back up (10 by step 70,
// hundreds by 80) until it is no number at all (step 86 here).
std::string collapsingRun(const TempDir& dir, const std::string& name, const std::string& extra = "") {
  return fmt::format("train --model mlp --dataset fashion-mnist --batch-size 32 --threads 1 --log-every 10 "
                     "--eval-every 0 --progress plain --out {} --max-steps 300 --momentum 0.9 --lr-schedule "
                     "piecewise --lr-boundaries 60 --lr-values 0.05,0.3 {}",
                     dir.str(name), extra);
}

// The step in "<what> ... at step N", or -1.
int64_t stepIn(const std::string& output, const std::string& what) {
  const std::string marker = "at step ";
  const size_t said = output.find(what);
  const size_t at = said == std::string::npos ? said : output.find(marker, said);
  return at == std::string::npos ? -1 : std::stoll(output.substr(at + marker.size()));
}

TEST(Collapse, ALossBackAboveItsStartStopsTheRunNamingTheFlagsToTry) {
  if (!testing::fashionMnistInstalled()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const auto r = testing::runTandem(collapsingRun(dir, "on"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("training collapsed: the loss rose back to"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Try a lower --lr (now 0.3)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--stop-on-collapse off lets such a run go on"), std::string::npos) << r.output;
  // Within a few steps of the rate's rise, long before the loss stops being a number.
  const int64_t stopped = stepIn(r.output, "training collapsed: the loss rose back to");
  EXPECT_GT(stopped, 60) << r.output;
  EXPECT_LT(stopped, 76) << r.output;

  // Off: the same run goes on until its loss is no number.
  const auto off = testing::runTandem(collapsingRun(dir, "off", "--stop-on-collapse off"));
  EXPECT_EQ(off.exit_code, 1) << off.output;
  EXPECT_GT(stepIn(off.output, "training collapsed: the loss became"), stopped) << off.output;
}

TEST(Collapse, ALossThatIsNotFiniteStopsTheRunEvenWithTheWatchOff) {
  TempDir dir;
  const auto r = testing::runTandem("train " + testing::syntheticTrainArgs("mlp", 32, dir.str("nan"),
                                                                           "--max-steps 100 --lr 1e30 "
                                                                           "--stop-on-collapse off"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("training collapsed: the loss became"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem
