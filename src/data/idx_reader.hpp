#pragma once
// Reader for the IDX format of MNIST and Fashion-MNIST, gzip'd or raw (zlib's
// gzread passes raw files through). Every header field is checked against
// the bytes actually present, so a corrupt file is an InputError naming the
// file, never a crash or a huge allocation. All functions are thread-safe
// (they share no state).
#include <torch/torch.h>

#include <filesystem>
#include <string>

namespace tandem::data {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // ubyte, 3 dims
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // ubyte, 1 dim

// uint8 [N, 1, H, W].
torch::Tensor readIdxImages(const std::filesystem::path& path);

// int64 [N]; callers check the range (see labels.hpp), since the class
// count comes from the training split.
torch::Tensor readIdxLabels(const std::filesystem::path& path);

// `dir/base.gz` if it exists, else `dir/base`; InputError naming both if neither does.
std::filesystem::path findIdxFile(const std::filesystem::path& dir, const std::string& base);

struct LabelledImages {
  torch::Tensor images;  // uint8 [N, C, H, W]
  torch::Tensor labels;  // int64 [N]
};

// Reads an image file and its label file and checks that the counts agree.
LabelledImages readIdxPair(const std::filesystem::path& images_path,
                           const std::filesystem::path& labels_path);

}  // namespace tandem::data
