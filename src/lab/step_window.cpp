#include "lab/step_window.hpp"

#include <fmt/format.h>

#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace tandem::lab {

StepWindow steadyWindow(const std::filesystem::path& metrics, int64_t warmup_steps, int64_t measure_steps) {
  std::ifstream in(metrics);
  if (!in) throw InputError(fmt::format("{}: cannot open the worker's metrics", metrics.string()));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    auto r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_object() && r.value("type", "") == "train" && r.contains("worker_step")) records.push_back(std::move(r));
  }
  size_t first = 0;
  while (first < records.size() && records[first]["worker_step"].get<int64_t>() < warmup_steps) ++first;
  if (measure_steps > 0) {
    while (!records.empty() && records.back()["worker_step"].get<int64_t>() > warmup_steps + measure_steps) {
      records.pop_back();
    }
  }
  if (records.empty() || records.size() < first + 2) {
    throw InputError(fmt::format("{}: {} per-step train record(s), too few to measure after {} warm-up step(s); "
                                 "train longer (and keep --log-every 1)",
                                 metrics.string(), records.size(), warmup_steps));
  }
  const auto& a = records[first];
  const auto& b = records.back();
  const int64_t n_a = a["worker_step"].get<int64_t>();
  const int64_t n_b = b["worker_step"].get<int64_t>();
  StepWindow w;
  w.begin_time = a["time"].get<double>();
  w.end_time = b["time"].get<double>();
  w.steps = n_b - n_a;
  // The records hold means since the start: difference the totals.
  w.breakdown = nlohmann::json::object();
  for (const auto& [phase, mean_b] : b["step_breakdown"].items()) {
    const double mean_a = a["step_breakdown"].value(phase, 0.0);
    const double total = mean_b.get<double>() * static_cast<double>(n_b) - mean_a * static_cast<double>(n_a);
    w.breakdown[phase] = w.steps > 0 ? total / static_cast<double>(w.steps) : 0.0;
  }
  return w;
}

}  // namespace tandem::lab
