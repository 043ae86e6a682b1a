#include "data/ctr_records.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>
#include <unordered_set>

#include "core/error.hpp"
#include "data/hash.hpp"

namespace tandem::data {
namespace {

constexpr int kColumns = 1 + kCtrDense + kCtrCategorical;

// a in [1, n) with gcd(a, n) == 1: rank -> (a * rank + b) mod n is a bijection.
uint64_t coprimeMultiplier(uint64_t n, uint64_t seed) {
  if (n <= 2) return 1;
  uint64_t a = splitmix64(seed) % (n - 1) + 1;
  while (std::gcd(a, n) != 1) a = a % (n - 1) + 1;
  return a;
}

double unitDouble(uint64_t bits) { return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0); }

}  // namespace

CtrRecord parseCriteoLine(std::string_view line, const std::string& file, int64_t line_number) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::array<std::string_view, kColumns> fields;
  int count = 0;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    const std::string_view field = line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start);
    if (count < kColumns) fields[static_cast<size_t>(count)] = field;
    ++count;
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  if (count != kColumns) {
    throw InputError(fmt::format("criteo {} line {}: {} column(s), expected {} (a label, {} integer and {} "
                                 "categorical features, tab-separated)",
                                 file, line_number, count, kColumns, kCtrDense, kCtrCategorical));
  }
  auto bad = [&](int column, std::string_view what) {
    return InputError(fmt::format("criteo {} line {} column {}: '{}' is not {}", file, line_number, column + 1,
                                  fields[static_cast<size_t>(column)], what));
  };
  CtrRecord record;
  if (fields[0] == "0" || fields[0] == "1") {
    record.label = fields[0] == "1" ? 1.0f : 0.0f;
  } else {
    throw bad(0, "a label (0 or 1)");
  }
  for (int i = 0; i < kCtrDense; ++i) {
    const std::string_view f = fields[static_cast<size_t>(1 + i)];
    if (f.empty()) continue;  // missing: 0
    int64_t value = 0;
    const auto [end, error] = std::from_chars(f.data(), f.data() + f.size(), value);
    if (error != std::errc() || end != f.data() + f.size()) throw bad(1 + i, "an integer");
    record.dense[static_cast<size_t>(i)] = static_cast<float>(std::log1p(static_cast<double>(std::max<int64_t>(value, 0))));
  }
  for (int i = 0; i < kCtrCategorical; ++i) {
    const std::string_view f = fields[static_cast<size_t>(1 + kCtrDense + i)];
    if (f.empty()) continue;  // missing: value 0
    uint32_t value = 0;
    const auto [end, error] = std::from_chars(f.data(), f.data() + f.size(), value, 16);
    if (f.size() > 8 || error != std::errc() || end != f.data() + f.size()) {
      throw bad(1 + kCtrDense + i, "a hashed category (up to 8 hex digits)");
    }
    record.categorical[static_cast<size_t>(i)] = value;
  }
  return record;
}

std::vector<CtrRecord> readCriteoFile(const std::string& path, int64_t max_records) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("criteo {}: cannot read it", path));
  std::vector<CtrRecord> records;
  std::string line;
  int64_t number = 0;
  while ((max_records < 0 || static_cast<int64_t>(records.size()) < max_records) && std::getline(in, line)) {
    ++number;
    if (line.empty() || line == "\r") continue;
    records.push_back(parseCriteoLine(line, path, number));
  }
  if (in.bad()) throw InputError(fmt::format("criteo {}: read failed after line {}", path, number));
  return records;
}

CtrRecord syntheticCtrExample(const SyntheticCtrOptions& o, int64_t index) {
  if (o.table_rows.size() > static_cast<size_t>(kCtrCategorical)) {
    throw InputError(fmt::format("synthetic-ctr: {} tables, at most {}", o.table_rows.size(), kCtrCategorical));
  }
  if (!(o.zipf_exponent > 1)) {
    throw InputError(fmt::format("synthetic-ctr: a power-law exponent of {}; it must be above 1", o.zipf_exponent));
  }
  CtrRecord record;
  const uint64_t example = mixSeed(o.seed, 0x63747221ULL, static_cast<uint64_t>(index));
  double logit = -1.0;  // about a quarter click, as display ads' sets are skewed
  for (int d = 0; d < kCtrDense; ++d) {
    const double x = unitDouble(mixSeed(example, 1000 + static_cast<uint64_t>(d)));
    record.dense[static_cast<size_t>(d)] = static_cast<float>(x);
    const double weight = unitDouble(mixSeed(o.seed, 2000 + static_cast<uint64_t>(d))) - 0.5;
    logit += weight * x;
  }
  for (size_t t = 0; t < o.table_rows.size(); ++t) {
    const int64_t rows = o.table_rows[t];
    if (rows <= 0) throw InputError(fmt::format("synthetic-ctr: table {} has {} rows", t, rows));
    const auto n = static_cast<double>(rows);
    const double s = o.zipf_exponent;
    // Inverse of the continuous power law's CDF over [1, n + 1).
    const double u = unitDouble(mixSeed(example, t));
    const double x = std::pow((std::pow(n + 1, 1 - s) - 1) * u + 1, 1 / (1 - s));
    const auto rank = std::min<uint64_t>(static_cast<uint64_t>(x) - 1, static_cast<uint64_t>(rows - 1));
    const uint64_t table_seed = mixSeed(o.seed, 3000 + t);
    const uint64_t id = (coprimeMultiplier(static_cast<uint64_t>(rows), table_seed) * rank + table_seed) %
                        static_cast<uint64_t>(rows);
    record.categorical[t] = static_cast<uint32_t>(id);
    // The row's hidden weight: what a learned embedding can recover.
    logit += 1.5 * (unitDouble(mixSeed(table_seed, id)) - 0.5);
  }
  const double click = 1 / (1 + std::exp(-logit));
  record.label = unitDouble(mixSeed(example, 4000)) < click ? 1.0f : 0.0f;
  return record;
}

SyntheticCtrStats describeSyntheticCtr(const SyntheticCtrOptions& options, int64_t examples) {
  SyntheticCtrStats stats;
  std::unordered_set<uint32_t> rows;
  double clicks = 0;
  for (int64_t i = 0; i < examples; ++i) {
    const CtrRecord r = syntheticCtrExample(options, i);
    clicks += r.label;
    if (!options.table_rows.empty()) rows.insert(r.categorical[0]);
  }
  stats.click_rate = examples > 0 ? clicks / static_cast<double>(examples) : 0;
  stats.distinct_rows_table0 = static_cast<int64_t>(rows.size());
  return stats;
}

}  // namespace tandem::data
