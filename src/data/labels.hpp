#pragma once
// Class counts and label checks shared by the readers: a dataset's class
// count is what its training labels imply (max + 1) unless its format fixes
// it, and every other split is checked against that. Thread-safe.
#include <torch/torch.h>

#include <filesystem>
#include <string>

namespace tandem::data {

// max(labels) + 1 of int64 labels; InputError naming `path` if empty or negative.
int64_t classCountOf(const torch::Tensor& labels, const std::filesystem::path& path);

// InputError naming `path`, the first bad label and its index unless every
// label of int64 `labels` lies in [0, num_classes). `source` says where the
// count came from, for the message (e.g. "the training labels").
void checkLabelRange(const torch::Tensor& labels, int64_t num_classes, const std::filesystem::path& path,
                     const std::string& source);

}  // namespace tandem::data
