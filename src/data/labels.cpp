#include "data/labels.hpp"

#include "core/error.hpp"

namespace tandem::data {

int64_t classCountOf(const torch::Tensor& labels, const std::filesystem::path& path) {
  if (labels.numel() == 0) throw InputError(fmt::format("{}: no labels", path.string()));
  const int64_t min = labels.min().item<int64_t>();
  if (min < 0) throw InputError(fmt::format("{}: negative label {}", path.string(), min));
  return labels.max().item<int64_t>() + 1;
}

void checkLabelRange(const torch::Tensor& labels, int64_t num_classes, const std::filesystem::path& path,
                     const std::string& source) {
  auto flat = labels.to(torch::kLong).contiguous();
  const int64_t* p = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (p[i] < 0 || p[i] >= num_classes) {
      throw InputError(fmt::format("{}: label {} at index {} is out of range for {} classes ({})", path.string(),
                                   p[i], i, num_classes, source));
    }
  }
}

}  // namespace tandem::data
