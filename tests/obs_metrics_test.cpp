#include <gtest/gtest.h>

#include <sstream>

#include <cstdio>
#include <filesystem>

#include "core/error.hpp"
#include "obs/metrics_writer.hpp"
#include "obs/progress.hpp"
#include "obs/step_breakdown.hpp"
#include "support/process.hpp"

namespace tandem::obs {
namespace {
using testing::readFile;
using testing::TempDir;

TEST(WriteFileAtomically, ReplacesContentAndLeavesNoTempFile) {
  TempDir dir;
  auto path = dir.path() / "f.json";
  writeFileAtomically(path, "first");
  writeFileAtomically(path, "second");
  EXPECT_EQ(readFile(path), "second");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST(WriteFileAtomically, FailureNamesPathAndKeepsOldFile) {
  TempDir dir;
  auto path = dir.path() / "missing-dir" / "f.json";
  try {
    writeFileAtomically(path, "x");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing-dir"), std::string::npos) << e.what();
  }
}

TEST(MetricsWriter, AppendsOneJsonObjectPerLineAndWritesSummary) {
  TempDir dir;
  MetricsWriter writer(dir.path() / "run");
  writer.append({{"step", 1}, {"loss", 2.5}});
  writer.append({{"step", 2}, {"loss", 1.5}});
  writer.writeSummary({{"steps", 2}});
  std::istringstream lines(readFile(dir.path() / "run" / "metrics.jsonl"));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["loss"], 2.5);
  EXPECT_EQ(records[1]["step"], 2);
  // Each line gains a wall-clock "time"; the event file's wall_time uses it.
  ASSERT_TRUE(records[0].contains("time") && records[1].contains("time")) << records[0];
  EXPECT_LE(records[0]["time"].get<double>(), records[1]["time"].get<double>());
  auto summary = nlohmann::json::parse(readFile(dir.path() / "run" / "summary.json"));
  EXPECT_EQ(summary.at("steps"), 2);
}

TEST(MetricsWriter, UncreatableDirectoryIsInputError) {
  TempDir dir;
  writeFileAtomically(dir.path() / "file", "x");
  EXPECT_THROW(MetricsWriter(dir.path() / "file" / "run"), InputError);
}

TEST(StepBreakdown, PhaseMeansAddUpToStepMean) {
  StepBreakdown b;
  b.add(Phase::kInputWait, 0.1);
  b.add(Phase::kForwardBackward, 0.5);
  b.add(Phase::kUpdate, 0.2);
  b.endStep();
  b.add(Phase::kForwardBackward, 0.7);
  b.add(Phase::kExposedComm, 0.3);
  b.endStep();
  EXPECT_EQ(b.steps(), 2);
  EXPECT_DOUBLE_EQ(b.meanSeconds(Phase::kForwardBackward), 0.6);
  EXPECT_DOUBLE_EQ(b.meanStepSeconds(), 0.9);
  auto j = b.toJson();
  double sum = 0;
  for (const char* key : {"input_wait", "forward_backward", "exposed_comm", "wait_workers", "update"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    sum += j[key].get<double>();
  }
  EXPECT_NEAR(sum, j["step"].get<double>(), 1e-12);
  b.reset();
  EXPECT_EQ(b.meanStepSeconds(), 0.0);
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(Progress::formatDuration(12.2), "12s");
  EXPECT_EQ(Progress::formatDuration(187), "3m07s");
  EXPECT_EQ(Progress::formatDuration(3720), "1h02m");
  EXPECT_EQ(Progress::formatDuration(-1), "?");
}

TEST(Progress, PlainModePrintsWholeLinesWithEta) {
  TempDir dir;
  auto path = dir.path() / "progress.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  {
    Progress p(0, 100, ProgressStyle::kPlain, /*plain_interval_s=*/3600, f);
    p.update({1, 0, 2.0, 100, 0.1});   // first update prints
    p.update({2, 0, 1.9, 100, 0.1});   // not due
    p.update({100, 3, 0.5, 100, 0.1}); // last step always prints
    p.finish();
  }
  std::fclose(f);
  std::string text = readFile(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("step 1/100"), std::string::npos) << text;
  EXPECT_NE(text.find("eta"), std::string::npos) << text;
  EXPECT_NE(text.find("step 100/100"), std::string::npos) << text;
}

TEST(Progress, RecordsModeWritesOneJsonRecordPerDueUpdate) {
  TempDir dir;
  auto path = dir.path() / "records.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  {
    Progress p(0, 10, ProgressStyle::kRecords, /*plain_interval_s=*/3600, f);
    p.update({1, 0, 2.0, 640, 0.1, 320});
    p.update({10, 0, 1.0, 640, 0.1, 330});  // the last always
  }
  std::fclose(f);
  std::istringstream lines(readFile(path));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);) {
    ASSERT_EQ(line.rfind(kProgressRecordPrefix, 0), 0u) << line;
    records.push_back(nlohmann::json::parse(line.substr(std::string(kProgressRecordPrefix).size())));
  }
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["step"], 1);
  EXPECT_EQ(records[1]["total"], 10);
  EXPECT_EQ(records[1]["worker_samples_per_sec"], 330);
}

}  // namespace
}  // namespace tandem::obs
