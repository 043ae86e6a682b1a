#include "train/fragment_schedule.hpp"

#include "core/error.hpp"

namespace tandem::train {

FragmentSchedule::FragmentSchedule(int64_t local_steps, int fragments, int64_t delay)
    : h_(local_steps), fragments_(fragments), delay_(delay) {
  TANDEM_ENFORCE(fragments_ >= 1 && h_ >= fragments_, "fragments must be in [1, local steps]");
  TANDEM_ENFORCE(delay_ >= 0 && delay_ < h_ / fragments_, "the delay must be below local steps / fragments");
}

int64_t FragmentSchedule::offset(int p) const { return (static_cast<int64_t>(p) + 1) * h_ / fragments_; }

std::optional<int> FragmentSchedule::startingAfter(int64_t step) const {
  const int64_t in_round = (step - 1) % h_ + 1;  // in [1, H]
  // Offsets rise strictly (H >= F), at least H/F apart.
  const auto p = static_cast<int>((in_round * fragments_ - 1) / h_);
  if (p < fragments_ && offset(p) == in_round) return p;
  return std::nullopt;
}

int64_t FragmentSchedule::startsThrough(int p, int64_t step) const {
  const int64_t first = offset(p);
  return step < first ? 0 : (step - first) / h_ + 1;
}

int64_t FragmentSchedule::startsBetween(int64_t start, int64_t end) const {
  int64_t n = 0;
  for (int p = 0; p < fragments_; ++p) n += startsThrough(p, end - 1) - startsThrough(p, start);
  return n;
}

int FragmentSchedule::fragmentOf(size_t c) const {
  return fragments_ - 1 - static_cast<int>(c % static_cast<size_t>(fragments_));
}

std::vector<size_t> FragmentSchedule::chunksOf(int p, size_t chunks) const {
  std::vector<size_t> out;
  for (auto c = static_cast<size_t>(fragments_ - 1 - p); c < chunks; c += static_cast<size_t>(fragments_)) {
    out.push_back(c);
  }
  return out;
}

int64_t FragmentClocks::chunkAt(const FragmentSchedule& s, int p, int64_t start) {
  return start == 0 ? 0 : s.startsThrough(p, start - 1) + 1;
}

int64_t FragmentClocks::reportsAt(const FragmentSchedule& s, int64_t start) {
  return start == 0 ? 0 : s.startsBetween(0, start) + 1;
}

int64_t FragmentClocks::reportsAfter(const FragmentSchedule& s, int64_t start, int64_t end) {
  return reportsAt(s, start) + s.startsBetween(start, end) + 1;
}

}  // namespace tandem::train
