#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "obs/metrics_writer.hpp"
#include "obs/tfevents.hpp"
#include "support/run_artifacts.hpp"
#include "support/process.hpp"

namespace tandem::obs {
namespace {
namespace fs = std::filesystem;
using testing::readFile;
using testing::TempDir;

// RFC 3720 (iSCSI) B.4 and the common "123456789" check value.
TEST(Crc32c, KnownAnswers) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(Crc32c, ContinuesAcrossPieces) {
  EXPECT_EQ(crc32c("6789", crc32c("12345")), 0xE3069283u);
}

TEST(Crc32c, MaskMatchesTfRecordDefinition) {
  // Computed with tests/support/read_tfevents.py, not with this code.
  EXPECT_EQ(maskedCrc32c("123456789"), 0xC78AB0E5u);
  EXPECT_EQ(maskedCrc32c(""), 0xA282EAD8u);
}

uint64_t readLe(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[pos + i]);
  return v;
}

TEST(TfRecord, FramesLengthDataAndBothMaskedCrcs) {
  const std::string data = "hello, tensorboard";
  const std::string record = tfRecord(data);
  ASSERT_EQ(record.size(), data.size() + 16);
  EXPECT_EQ(readLe(record, 0, 8), data.size());
  EXPECT_EQ(readLe(record, 8, 4), maskedCrc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, data.size()), data);
  EXPECT_EQ(readLe(record, 12 + data.size(), 4), maskedCrc32c(data));
}

// Runs the independent Python reader; fails the test unless it exits 0.
std::vector<nlohmann::json> readWithPython(const fs::path& file) {
  const auto result = testing::runCommand(std::string("python3 ") + TANDEM_SOURCE_DIR +
                                          "/tests/support/read_tfevents.py " + file.string(),
                                          std::chrono::seconds(60));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  std::vector<nlohmann::json> lines;
  std::istringstream in(result.output);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

using testing::jsonLines;

std::vector<fs::path> eventFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path());
  }
  return files;
}

TEST(EventFileWriter, NameFollowsTensorBoardPatternAndIsUniquePerWriter) {
  TempDir dir;
  EventFileWriter a(dir.path(), 1700000000.75);
  EventFileWriter b(dir.path(), 1700000000.75);
  EXPECT_NE(a.path(), b.path());
  const std::string name = a.path().filename().string();
  const std::string prefix = "events.out.tfevents.1700000000.";
  EXPECT_EQ(name.rfind(prefix, 0), 0u) << name;
  EXPECT_NE(name.find(fmt::format(".{}.", ::getpid())), std::string::npos) << name;
  EXPECT_EQ(eventFiles(dir.path()).size(), 2u);
}

TEST(EventFileWriter, FirstRecordIsFileVersionAndScalarsRoundTrip) {
  TempDir dir;
  EventFileWriter writer(dir.path(), 1700000000.5);
  const std::vector<Scalar> scalars = {{"a/x", 1.25f}, {"a/zero", 0.0f}, {"b", -3.5e-7f}};
  writer.writeScalars(7, 1700000001.25, scalars);
  writer.writeScalars(0, 1700000002.0, std::vector<Scalar>{{"a/x", 2.5f}});
  // Read while the writer is still open: each record is on disk already.
  const auto lines = readWithPython(writer.path());
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].at("file_version"), "brain.Event:2");
  EXPECT_EQ(lines[0].at("wall_time").get<double>(), 1700000000.5);
  for (size_t i = 0; i < scalars.size(); ++i) {
    EXPECT_EQ(lines[1 + i].at("tag"), scalars[i].tag);
    EXPECT_EQ(lines[1 + i].at("step"), 7);
    ASSERT_TRUE(lines[1 + i].at("value").is_number()) << lines[1 + i];
    EXPECT_EQ(lines[1 + i].at("value").get<float>(), scalars[i].value);
    EXPECT_EQ(lines[1 + i].at("wall_time").get<double>(), 1700000001.25);
  }
  EXPECT_EQ(lines[4].at("tag"), "a/x");
  EXPECT_EQ(lines[4].at("step"), 0);
  EXPECT_EQ(lines[4].at("value").get<float>(), 2.5f);
}

TEST(EventFileWriter, MissingDirectoryIsInputErrorNamingThePath) {
  TempDir dir;
  try {
    EventFileWriter writer(dir.path() / "no-such-dir", 1.0);
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir/events.out.tfevents."), std::string::npos) << e.what();
  }
}

TEST(EventFileWriter, PythonReaderRejectsACorruptedByte) {
  TempDir dir;
  fs::path path;
  {
    EventFileWriter writer(dir.path(), 1700000000.0);
    writer.writeScalars(3, 1700000001.0, std::vector<Scalar>{{"train/loss", 0.5f}});
    path = writer.path();
  }
  const std::string good = readFile(path);
  ASSERT_EQ(readWithPython(path).size(), 2u);  // the intact file passes

  const auto reader = std::string("python3 ") + TANDEM_SOURCE_DIR + "/tests/support/read_tfevents.py ";
  // Offset 0 damages the first record's length field; the last-but-five
  // byte sits inside the last record's data.
  const std::vector<std::pair<size_t, std::string>> cases = {{0, "length CRC mismatch"},
                                                             {good.size() - 5, "data CRC mismatch"}};
  for (const auto& [offset, expected] : cases) {
    std::string bad = good;
    bad[offset] = static_cast<char>(bad[offset] ^ 0x01);
    const fs::path bad_path = dir.path() / ("bad-" + std::to_string(offset));
    std::ofstream(bad_path, std::ios::binary) << bad;
    const auto result = testing::runCommand(reader + bad_path.string(), std::chrono::seconds(60));
    EXPECT_EQ(result.exit_code, 1) << "offset " << offset << ": " << result.output;
    EXPECT_NE(result.output.find(expected), std::string::npos) << "offset " << offset << ": " << result.output;
  }
}

TEST(TensorBoardScalars, MapsNumericFieldsToTags) {
  const nlohmann::json train = {{"type", "train"}, {"step", 10}, {"epoch", 1}, {"loss", 0.5}, {"time", 5.0},
                                {"note", "x"}, {"flag", true},
                                {"step_breakdown", {{"input_wait", 0.25}, {"step", 1.0}}}};
  std::vector<std::pair<std::string, float>> got;
  for (const auto& s : tensorBoardScalars(train)) got.emplace_back(s.tag, s.value);
  const std::vector<std::pair<std::string, float>> want = {
      {"train/epoch", 1.0f}, {"train/loss", 0.5f}, {"step_time/input_wait", 0.25f}, {"step_time/total", 1.0f}};
  EXPECT_EQ(got, want);

  got.clear();
  for (const auto& s : tensorBoardScalars({{"step", 2}, {"loss", 3.0}, {"extra", {{"k", 4}}}})) {
    got.emplace_back(s.tag, s.value);
  }
  const std::vector<std::pair<std::string, float>> untyped = {{"extra/k", 4.0f}, {"loss", 3.0f}};
  EXPECT_EQ(got, untyped);
  EXPECT_TRUE(tensorBoardScalars(nlohmann::json::array({1, 2})).empty());
}

TEST(MetricsWriter, EventFileHoldsEveryNumericFieldAtTheRecordsStepAndTime) {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  MetricsWriter writer(run);
  writer.append({{"type", "resume"}, {"step", 0}, {"checkpoint", "c.ckpt"}});  // nothing numeric
  writer.append({{"type", "train"}, {"step", 10}, {"epoch", 0}, {"loss", 2.25}, {"lr", 0.1},
                 {"samples_per_sec", 1234.5},
                 {"step_breakdown", {{"input_wait", 0.001}, {"forward_backward", 0.02}, {"exposed_comm", 0.0},
                                     {"step", 0.021}}}});
  writer.append({{"type", "note"}, {"loss", 9.0}});  // no step: not charted
  writer.append({{"type", "eval"}, {"step", 20}, {"epoch", 1}, {"test_accuracy", 0.8125}, {"test_loss", 0.5},
                 {"time", 1700000123.5}});

  const auto metrics = jsonLines(run / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 4u);
  for (const auto& m : metrics) ASSERT_TRUE(m.contains("time") && m["time"].is_number_float()) << m;
  EXPECT_EQ(metrics[3]["time"].get<double>(), 1700000123.5);  // a given time is kept
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(metrics[1]["time"].get<double>(), now, 60.0);

  ASSERT_EQ(eventFiles(run).size(), 1u);
  EXPECT_EQ(eventFiles(run)[0], writer.eventsPath());
  const auto events = readWithPython(writer.eventsPath());
  struct Want {
    std::string tag;
    int64_t step;
    double value;
    double wall_time;
  };
  const double train_time = metrics[1]["time"].get<double>();
  const std::vector<Want> want = {
      {"train/epoch", 10, 0, train_time},
      {"train/loss", 10, 2.25, train_time},
      {"train/lr", 10, 0.1, train_time},
      {"train/samples_per_sec", 10, 1234.5, train_time},
      {"step_time/exposed_comm", 10, 0.0, train_time},
      {"step_time/forward_backward", 10, 0.02, train_time},
      {"step_time/input_wait", 10, 0.001, train_time},
      {"step_time/total", 10, 0.021, train_time},
      {"eval/epoch", 20, 1, 1700000123.5},
      {"eval/test_accuracy", 20, 0.8125, 1700000123.5},
      {"eval/test_loss", 20, 0.5, 1700000123.5},
  };
  ASSERT_EQ(events.size(), want.size() + 1) << "one file_version record plus one line per scalar";
  EXPECT_EQ(events[0].at("file_version"), "brain.Event:2");
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& e = events[i + 1];
    EXPECT_EQ(e.at("tag"), want[i].tag) << i;
    EXPECT_EQ(e.at("step").get<int64_t>(), want[i].step) << want[i].tag;
    ASSERT_TRUE(e.at("value").is_number()) << e;
    EXPECT_EQ(e.at("value").get<float>(), static_cast<float>(want[i].value)) << want[i].tag;
    EXPECT_EQ(e.at("wall_time").get<double>(), want[i].wall_time) << want[i].tag;
  }
}

TEST(MetricsWriter, EachWriterStartsItsOwnEventFile) {
  TempDir dir;
  fs::path first;
  {
    MetricsWriter writer(dir.path());
    writer.append({{"type", "train"}, {"step", 1}, {"loss", 1.0}});
    first = writer.eventsPath();
  }
  MetricsWriter resumed(dir.path());  // a resumed run appends to metrics.jsonl
  resumed.append({{"type", "train"}, {"step", 2}, {"loss", 0.5}});
  EXPECT_NE(resumed.eventsPath(), first);
  EXPECT_EQ(eventFiles(dir.path()).size(), 2u);
  EXPECT_EQ(jsonLines(dir.path() / "metrics.jsonl").size(), 2u);
  const auto events = readWithPython(resumed.eventsPath());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].at("step"), 2);
  EXPECT_EQ(events[1].at("value").get<float>(), 0.5f);
}

}  // namespace
}  // namespace tandem::obs
