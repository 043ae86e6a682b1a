#pragma once
// Click-through-rate data for recommendation models (issue 54): Criteo's
// display-advertising layout, read from its documentation, and a synthetic
// stand-in with the two properties that matter to embedding tables, a
// power-law popularity of rows and a click a model can learn. Torch-free.
//
// Criteo's TSV (the Kaggle Display Advertising Challenge and its 1 TB
// successor): one example a line, 40 tab-separated columns: the label (0
// or 1), 13 integer features (counts, possibly negative, possibly empty),
// then 26 categorical features, each 8 hex digits of a hashed value,
// possibly empty. DLRM's preprocessing is kept: an integer x becomes
// log(1 + max(x, 0)), a missing one 0; a category's value, 0 when missing,
// picks row value mod the table's rows.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

inline constexpr int kCtrDense = 13;
inline constexpr int kCtrCategorical = 26;

struct CtrRecord {
  float label = 0;
  std::array<float, kCtrDense> dense{};
  std::array<uint32_t, kCtrCategorical> categorical{};  // hashed values; the row is value mod rows
};

// One line (without its newline; a trailing '\r' is allowed). Throws
// InputError naming `file`, the line and the column for a line without 40
// columns, a label other than 0 or 1, or a field that does not parse.
CtrRecord parseCriteoLine(std::string_view line, const std::string& file, int64_t line_number);

// The examples of a file, at most `max_records` (-1: all). Throws
// InputError naming the file when it cannot be read, and as parseCriteoLine.
std::vector<CtrRecord> readCriteoFile(const std::string& path, int64_t max_records = -1);

// The row of a categorical value in a table of `rows` rows.
inline int64_t ctrRow(uint32_t value, int64_t rows) { return static_cast<int64_t>(value % static_cast<uint64_t>(rows)); }

struct SyntheticCtrOptions {
  int64_t examples = 0;
  std::vector<int64_t> table_rows;  // one table per categorical feature used (at most 26)
  double zipf_exponent = 1.05;      // row popularity: rank r drawn with weight r^-s
  uint64_t seed = 0;
};

// Example `index` of a synthetic CTR set, a pure function of the options
// and the index. Each table's rows are drawn by a power law over ranks,
// and ranks are scattered over the ids (a bijection), so popular rows sit
// on every server. The click is drawn from a hidden logistic model: every
// row has a hidden weight (from the seed) and the dense features theirs,
// so a model that learns the rows' embeddings can predict it. Unused
// categorical features are 0. Throws InputError for more than 26 tables,
// a table of no rows, or an exponent not above 1.
CtrRecord syntheticCtrExample(const SyntheticCtrOptions& options, int64_t index);

// The fraction of the first `examples` synthetic examples that clicked, and
// how many distinct rows of table 0 they touched: what a test or the bench
// reports about the set.
struct SyntheticCtrStats {
  double click_rate = 0;
  int64_t distinct_rows_table0 = 0;
};
SyntheticCtrStats describeSyntheticCtr(const SyntheticCtrOptions& options, int64_t examples);

}  // namespace tandem::data
