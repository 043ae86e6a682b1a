// End-to-end tests of streaming DiLoCo (--fragments, --fragment-delay,
// --fragment-mix) on real `tandem launch` processes: where the exchange
// reduces to a known run it gives that run, each exchange carries one
// fragment (counted by the servers), a run resumes from its end or from a
// checkpoint mid-run, and bad input names its flag.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/process.hpp"
#include "support/run_artifacts.hpp"

namespace tandem {
namespace {
using testing::checkpointParameters;
using testing::expectSameParameters;
using testing::maxAbsoluteDifference;
using testing::runTandem;
using testing::summaryOf;
using testing::syntheticTrainArgs;
using testing::TempDir;

// Small chunks, so that the mlp's fragments hold several each.
constexpr const char* kChunks = " --ps-chunk-mb 0.02";

class StreamingDiloco : public ::testing::Test {
 protected:
  TempDir dir_;

  testing::ProcessResult launch(int workers, const std::string& out, const std::string& args,
                                const std::string& chunks = kChunks) {
    return runTandem(fmt::format("launch --ps 1 --workers {} -- ", workers) +
                     syntheticTrainArgs("mlp", 16, dir_.str(out), args + chunks));
  }

  // Outer SGD at rate 1 without momentum makes each exchange's global
  // fragment the worker's local one. With one worker, merging it unmixed
  // right away (`streaming`: delay 0, mix 0), or keeping the local values
  // (mix 1), leaves standalone training.
  void expectStandalone(const std::string& out, const std::string& streaming) {
    const std::string inner = "--max-steps 30 --seed 4 --optimizer adam --lr 0.002";
    auto run = launch(1, out,
                      inner + " --local-steps 6 --outer-optimizer sgd --outer-lr 1 --outer-momentum 0 " + streaming);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    if (!std::filesystem::exists(dir_.path() / "alone")) {
      auto alone = runTandem("train " + syntheticTrainArgs("mlp", 16, dir_.str("alone"), inner + " --overwrite"));
      ASSERT_EQ(alone.exit_code, 0) << alone.output;
    }
    EXPECT_LT(maxAbsoluteDifference(checkpointParameters(dir_.str(out + "/checkpoint.ckpt")),
                                    checkpointParameters(dir_.str("alone/checkpoint.ckpt"))),
              1e-5)
        << streaming;
  }
};

TEST_F(StreamingDiloco, OneWorkerWithUnitOuterSgdTrainsAsStandalone) {
  expectStandalone("replaced", "--fragments 3 --fragment-delay 0 --fragment-mix 0");
  expectStandalone("kept", "--fragments 3 --fragment-delay 1 --fragment-mix 1");
  // Starts after steps 2, 4, ..., 28 (14 of them), and all fragments after 30.
  const auto d = summaryOf(dir_.path() / "kept")["strategy"]["diloco"];
  EXPECT_EQ(d["streaming"]["exchanges"], 15) << d.dump();
  EXPECT_FALSE(d.contains("rounds"));
}

// A model of one chunk is all in the last fragment, exchanged at plain
// DiLoCo's round ends: unmixed and without delay, two workers' streaming
// run is plain DiLoCo's, outer momentum and each worker's share included.
TEST_F(StreamingDiloco, AOneChunkModelStreamsAsPlainDiloco) {
  const std::string args = "--optimizer sgd --lr 0.05 --local-steps 4 --max-steps 18 --seed ";
  const std::string one_chunk = " --ps-chunk-mb 64";
  auto plain = launch(2, "plain", args + "5", one_chunk);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto streamed = launch(2, "streamed", args + "5 --fragments 2 --fragment-delay 0 --fragment-mix 0", one_chunk);
  ASSERT_EQ(streamed.exit_code, 0) << streamed.output;
  ASSERT_EQ(summaryOf(dir_.path() / "streamed" / "ps" / "ps-0")["chunks"], 1);
  EXPECT_LT(maxAbsoluteDifference(checkpointParameters(dir_.str("plain/checkpoint.ckpt")),
                                  checkpointParameters(dir_.str("streamed/checkpoint.ckpt"))),
            1e-6);
  auto other = launch(2, "other", args + "6", one_chunk);  // the comparison can fail
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_GT(maxAbsoluteDifference(checkpointParameters(dir_.str("plain/checkpoint.ckpt")),
                                  checkpointParameters(dir_.str("other/checkpoint.ckpt"))),
            1e-3);
}

// Mixing is not a no-op: delay 1 at mix 0.5 moves the run off standalone.
TEST_F(StreamingDiloco, MixingAnOverlappedExchangeChangesTheRun) {
  const std::string inner = "--max-steps 30 --seed 4 --optimizer adam --lr 0.002 --local-steps 6 --outer-optimizer "
                            "sgd --outer-lr 1 --outer-momentum 0 --fragments 3";
  auto mixed = launch(1, "mixed", inner + " --fragment-delay 1 --fragment-mix 0.5");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  auto kept = launch(1, "kept", inner + " --fragment-delay 1 --fragment-mix 1");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_GT(maxAbsoluteDifference(checkpointParameters(dir_.str("mixed/checkpoint.ckpt")),
                                  checkpointParameters(dir_.str("kept/checkpoint.ckpt"))),
            1e-4);
}

// Each exchange pushes one fragment, so over the run every worker pushes
// the model about once a round (plus the last step's whole model), and the
// server receives exactly what the workers say they pushed.
TEST_F(StreamingDiloco, EachExchangeCarriesOneFragment) {
  auto run = launch(2, "run", "--seed 2 --local-steps 4 --fragments 2 --fragment-delay 1 --max-steps 18");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto server = summaryOf(dir_.path() / "run" / "ps" / "ps-0");
  ASSERT_GE(server["chunks"].get<int>(), 4) << server.dump();
  const int64_t model_bytes = 4 * server["floats"].get<int64_t>();
  int64_t pushed = 0;
  for (const auto& dir : {dir_.path() / "run", dir_.path() / "run" / "workers" / "worker-1"}) {
    const auto d = summaryOf(dir)["strategy"]["diloco"];
    EXPECT_EQ(d["streaming"]["exchanges"], 9) << dir;  // after 2, 4, ..., 16, then all after 18
    pushed += d["pushed_bytes"].get<int64_t>();
    // Starts after 2, 6, 10, 14 push fragment 0, after 4, 8, 12, 16 fragment 1: four models, then the last.
    EXPECT_EQ(d["pushed_bytes"].get<int64_t>(), 5 * model_bytes) << dir;
  }
  EXPECT_EQ(pushed, server["bytes_in"].get<int64_t>());
}

// 4 bits a pushed value, plus a float32 scale per 128 of each chunk's
// values; pulls stay float32.
TEST_F(StreamingDiloco, FourBitPushesCarryAnEighthOfTheBytes) {
  auto run = launch(2, "int4", "--seed 2 --local-steps 4 --fragments 2 --fragment-delay 1 --max-steps 18 --push-bits 4");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto server = summaryOf(dir_.path() / "int4" / "ps" / "ps-0");
  const int64_t floats = server["floats"], chunks = server["chunks"];
  int64_t pushed = 0;
  for (const auto& dir : {dir_.path() / "int4", dir_.path() / "int4" / "workers" / "worker-1"}) {
    const auto d = summaryOf(dir)["strategy"]["diloco"];
    EXPECT_EQ(d["pulled_bytes"].get<int64_t>(), 5 * 4 * floats) << "four models and the last, " << dir;
    const int64_t bytes = d["pushed_bytes"];
    // Per chunk: ceil(n / 2) codes and ceil(n / 128) scales.
    EXPECT_GE(bytes, 5 * (floats / 2 + 4 * (floats / 128))) << dir;
    EXPECT_LE(bytes, 5 * (floats / 2 + chunks + 4 * (floats / 128 + chunks))) << dir;
    pushed += bytes;
  }
  EXPECT_EQ(pushed, server["bytes_in"].get<int64_t>());
  const auto losses = testing::trainLosses(dir_.str("int4"));
  ASSERT_GE(losses.size(), 2u);
  EXPECT_LT(losses.back(), losses.front());
}

// The run's last step exchanges every fragment, so a resume starts from one
// global model, with each chunk's servers at their own fragment's count.
TEST_F(StreamingDiloco, ResumesFromTheRunsEnd) {
  const std::string args = "--seed 8 --optimizer sgd --lr 0.05 --local-steps 4 --fragments 2 --fragment-delay 1";
  auto first = launch(2, "run", args + " --max-steps 11");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second = launch(2, "run", args + " --max-steps 20");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  // After 12, 14, 16, 18, then all after 20.
  EXPECT_EQ(summaryOf(dir_.path() / "run")["strategy"]["diloco"]["streaming"]["exchanges"], 5);

  auto other = launch(2, "run", "--seed 8 --optimizer sgd --lr 0.05 --local-steps 4 --fragments 4 --max-steps 24");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("distributed/fragments differs"), std::string::npos) << other.output;
}

// A checkpoint lands right after a merge, with no exchange in flight: the
// servers' global model in the chief's file, and each worker's own model
// (and inner state) beside it. Resuming there ends where the uninterrupted
// run did, bit for bit; a worker's missing own model is named.
TEST_F(StreamingDiloco, ResumesFromAMidRunCheckpointExactly) {
  namespace fs = std::filesystem;
  const std::string args = "--seed 8 --optimizer adam --lr 0.002 --local-steps 4 --fragments 2 --fragment-delay 1 "
                           "--max-steps 20 --checkpoint-every 8";
  auto straight = launch(2, "straight", args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  // Due after step 8, asked for in the report of the exchange that starts
  // there, agreed at its merge after step 9.
  const fs::path run = dir_.path() / "straight";
  ASSERT_TRUE(fs::exists(run / "checkpoints" / "step-9.ckpt"));
  // Once each: due after 8 and 16, taken at the merges after 9 and 17 (and
  // the run's end, 20), by the chief and by every worker beside it.
  auto files = [](const fs::path& dir, const std::string& suffix) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() == suffix) names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(files(run / "checkpoints", ".ckpt"), (std::vector<std::string>{"step-17.ckpt", "step-9.ckpt"}));
  const std::vector<std::string> kept{"step-17.pt", "step-20.pt", "step-9.pt"};
  for (const char* worker : {"worker-0", "worker-1"}) {
    EXPECT_EQ(files(run / "workers" / worker / "local-model", ".pt"), kept) << worker;
  }
  EXPECT_EQ(files(run / "workers" / "worker-1" / "inner-state", ".pt"), kept);

  // The same directory as if the run had died after its checkpoint at step 9.
  auto restart = [&](const std::string& name) {
    const fs::path copy = dir_.path() / name;
    fs::copy(run, copy, fs::copy_options::recursive);
    fs::remove(copy / "checkpoint.ckpt");
    std::ofstream(copy / "checkpoints" / "latest") << "checkpoints/step-9.ckpt\n";
    return copy;
  };
  restart("resumed");
  auto resumed = launch(2, "resumed", args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 9"), std::string::npos) << resumed.output;
  expectSameParameters(dir_.str("straight/checkpoint.ckpt"), dir_.str("resumed/checkpoint.ckpt"));

  fs::remove(restart("missing") / "workers" / "worker-1" / "local-model" / "step-9.pt");
  auto missing = launch(2, "missing", args);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("local-model/step-9.pt: missing"), std::string::npos) << missing.output;
}

TEST_F(StreamingDiloco, BadInputNamesTheFlag) {
  const std::pair<std::string, std::string> cases[] = {
      {"--fragments 2", "--fragments: only applies with --local-steps"},
      {"--local-steps 4 --fragments 0", "--fragments: must be >= 1"},
      {"--local-steps 4 --fragments 5", "--fragments: at most --local-steps (4)"},
      {"--local-steps 4 --fragments 2 --fragment-delay 2", "--fragment-delay: must be below --local-steps / --fragments"},
      {"--local-steps 4 --fragment-mix 1.5", "--fragment-mix: must be in [0, 1]"},
      {"--local-steps 4 --fragments 2 --ps-mode async", "streaming DiLoCo runs with --ps-mode sync"},
  };
  for (const auto& [args, says] : cases) {
    auto run = launch(1, "bad", "--max-steps 4 " + args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(says), std::string::npos) << args << "\n" << run.output;
  }
}

}  // namespace
}  // namespace tandem
