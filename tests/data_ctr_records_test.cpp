// Click data for recommendation models: Criteo's TSV layout read from its
// documentation (a generated file: label, 13 integers, 26 hashed
// categories, with the gaps real files have), its bad lines named by file,
// line and column; and synthetic-ctr's power-law rows and learnable clicks.
#include "data/ctr_records.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "core/error.hpp"
#include "support/expect_input_error.hpp"
#include "support/process.hpp"

namespace tandem::data {
namespace {

using tandem::testing::inputErrorOf;

// A Criteo line from its fields: "" for a missing one.
std::string line(const std::string& label, const std::vector<std::string>& ints, const std::vector<std::string>& cats) {
  std::string text = label;
  for (const auto& f : ints) text += "\t" + f;
  for (const auto& f : cats) text += "\t" + f;
  return text;
}

std::vector<std::string> cats(const std::string& first) {
  std::vector<std::string> c(26, "05db9164");
  c[0] = first;
  c[25] = "";  // missing, as in real files
  return c;
}

TEST(CriteoLine, FieldsBecomeDlrmsFeatures) {
  std::vector<std::string> ints{"1", "", "-1", "0", "1382", "4", "15", "2", "181", "1", "2", "", "2"};
  const CtrRecord r = parseCriteoLine(line("1", ints, cats("68fd1e64")), "day_0", 1);
  EXPECT_EQ(r.label, 1.0f);
  EXPECT_FLOAT_EQ(r.dense[0], static_cast<float>(std::log1p(1.0)));
  EXPECT_EQ(r.dense[1], 0.0f);  // missing
  EXPECT_EQ(r.dense[2], 0.0f);  // negative counts clip to 0, as DLRM's preprocessing does
  EXPECT_FLOAT_EQ(r.dense[4], static_cast<float>(std::log1p(1382.0)));
  EXPECT_EQ(r.categorical[0], 0x68fd1e64u);
  EXPECT_EQ(r.categorical[1], 0x05db9164u);
  EXPECT_EQ(r.categorical[25], 0u);  // missing
  EXPECT_EQ(ctrRow(0x68fd1e64u, 1000), static_cast<int64_t>(0x68fd1e64u % 1000));
  // A Windows line end is not a field.
  EXPECT_EQ(parseCriteoLine(line("0", ints, cats("1")) + "\r", "f", 2).categorical[0], 1u);
}

TEST(CriteoLine, ABadLineIsNamedByFileLineAndColumn) {
  const std::vector<std::string> ints(13, "3");
  std::vector<std::string> short_cats = cats("a");
  short_cats.pop_back();
  EXPECT_EQ(inputErrorOf([&] { parseCriteoLine(line("0", ints, short_cats), "day_1.tsv", 7); }),
            "criteo day_1.tsv line 7: 39 column(s), expected 40 (a label, 13 integer and 26 categorical features, "
            "tab-separated)");
  EXPECT_EQ(inputErrorOf([&] { parseCriteoLine(line("2", ints, cats("a")), "f", 1); }),
            "criteo f line 1 column 1: '2' is not a label (0 or 1)");
  std::vector<std::string> bad_ints = ints;
  bad_ints[3] = "4x";
  EXPECT_EQ(inputErrorOf([&] { parseCriteoLine(line("0", bad_ints, cats("a")), "f", 1); }),
            "criteo f line 1 column 5: '4x' is not an integer");
  EXPECT_EQ(inputErrorOf([&] { parseCriteoLine(line("0", ints, cats("zz")), "f", 1); }),
            "criteo f line 1 column 15: 'zz' is not a hashed category (up to 8 hex digits)");
  EXPECT_NE(inputErrorOf([&] { parseCriteoLine(line("0", ints, cats("123456789")), "f", 1); }).find("column 15"),
            std::string::npos);
}

TEST(CriteoFile, AGeneratedFileReadsBackRecordForRecord) {
  testing::TempDir dir;
  const std::string path = dir.str("day_0");
  std::mt19937 rng(3);
  std::vector<CtrRecord> expected;
  {
    std::ofstream out(path);
    for (int n = 0; n < 200; ++n) {
      std::vector<std::string> ints, hashes;
      CtrRecord r;
      r.label = static_cast<float>(rng() % 2);
      for (int i = 0; i < 13; ++i) {
        const int v = static_cast<int>(rng() % 1000) - 2;
        const bool missing = rng() % 5 == 0;
        ints.push_back(missing ? "" : std::to_string(v));
        r.dense[static_cast<size_t>(i)] = missing ? 0 : static_cast<float>(std::log1p(std::max(v, 0)));
      }
      for (int i = 0; i < 26; ++i) {
        const uint32_t v = static_cast<uint32_t>(rng());
        const bool missing = rng() % 7 == 0;
        hashes.push_back(missing ? "" : fmt::format("{:08x}", v));
        r.categorical[static_cast<size_t>(i)] = missing ? 0 : v;
      }
      out << line(r.label > 0 ? "1" : "0", ints, hashes) << "\n";
      expected.push_back(r);
    }
  }
  const std::vector<CtrRecord> records = readCriteoFile(path);
  ASSERT_EQ(records.size(), expected.size());
  for (size_t n = 0; n < records.size(); ++n) {
    EXPECT_EQ(records[n].label, expected[n].label) << "line " << n + 1;
    EXPECT_EQ(records[n].dense, expected[n].dense) << "line " << n + 1;
    EXPECT_EQ(records[n].categorical, expected[n].categorical) << "line " << n + 1;
  }
  EXPECT_EQ(readCriteoFile(path, 10).size(), 10u);
  {
    std::ofstream out(path, std::ios::app);
    out << "1\t2\n";
  }
  EXPECT_NE(inputErrorOf([&] { readCriteoFile(path); }).find("line 201: 2 column(s)"), std::string::npos);
  EXPECT_EQ(inputErrorOf([&] { readCriteoFile(dir.str("absent")); }), "criteo " + dir.str("absent") + ": cannot read it");
}

TEST(SyntheticCtr, PowerLawRowsAndClicksThatDependOnThem) {
  SyntheticCtrOptions o{.examples = 20000, .table_rows = {1000000, 50, 7}, .zipf_exponent = 1.05, .seed = 4};
  const CtrRecord a = syntheticCtrExample(o, 123);
  EXPECT_EQ(a.categorical, syntheticCtrExample(o, 123).categorical);  // a pure function of the index
  EXPECT_EQ(a.label, syntheticCtrExample(o, 123).label);
  EXPECT_EQ(a.categorical[3], 0u);  // unused features
  std::map<uint32_t, std::pair<int, int>> by_row;  // table 1's row -> (examples, clicks)
  for (int64_t i = 0; i < o.examples; ++i) {
    const CtrRecord r = syntheticCtrExample(o, i);
    ASSERT_LT(r.categorical[0], 1000000u);
    ASSERT_LT(r.categorical[1], 50u);
    ASSERT_LT(r.categorical[2], 7u);
    auto& [n, clicks] = by_row[r.categorical[1]];
    ++n;
    clicks += r.label > 0;
  }
  const SyntheticCtrStats stats = describeSyntheticCtr(o, o.examples);
  EXPECT_GT(stats.click_rate, 0.15);
  EXPECT_LT(stats.click_rate, 0.5);
  // Popular rows repeat: 20,000 draws from a million rows touch far fewer.
  EXPECT_LT(stats.distinct_rows_table0, 12000);
  // The click depends on the rows: click rates of table 1's rows spread
  // far beyond what chance alone gives at their counts.
  double spread = 0, chance = 0;
  for (const auto& [row, nc] : by_row) {
    if (nc.first < 100) continue;
    const double rate = static_cast<double>(nc.second) / nc.first;
    spread += (rate - stats.click_rate) * (rate - stats.click_rate);
    chance += stats.click_rate * (1 - stats.click_rate) / nc.first;
  }
  EXPECT_GT(spread, 3 * chance);
  EXPECT_THROW(syntheticCtrExample({.examples = 1, .table_rows = {10}, .zipf_exponent = 1.0}, 0), InputError);
  EXPECT_THROW(syntheticCtrExample({.examples = 1, .table_rows = {0}}, 0), InputError);
}

}  // namespace
}  // namespace tandem::data
