#pragma once
// The torchvision/ImageNet layout, DIR/{train,val}/<class>/*.{jpg,jpeg,png}:
// sorted class directory names give the labels. Only the file list is built
// at open (with a header check of each file); images are read and decoded
// per sample in getBatch, which runs on the prefetch threads.
//
// Bad files: a file whose header does not parse is left out at open with
// one warning naming it. A file that passes that check but fails to decode
// later (e.g. truncated data) is replaced by the next decodable sample of
// the split, deterministically, with one warning per file for the run.
// With strict_data either case is an InputError naming the file.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/normalization.hpp"

namespace tandem::data {

struct ImageFile {
  std::string path;
  int64_t label = 0;
};

class ImageFolderDataset final : public Dataset {
 public:
  // `train`: RandomResizedCrop + flip; otherwise resize + centre crop.
  ImageFolderDataset(std::string name, std::vector<ImageFile> files, int64_t num_classes, int64_t image_size,
                     Normalization norm, bool train, bool strict);

  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  SampleShape shape() const override { return {3, image_size_, image_size_}; }
  int64_t numClasses() const override { return num_classes_; }
  // Thread-safe: files_ is immutable; the bad-file marks are atomics.
  Batch getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const override;

  const std::vector<ImageFile>& files() const { return files_; }

 private:
  // Decodes and transforms sample `index` into out; false if it fails to decode.
  bool loadSample(int64_t index, int64_t draw_index, uint64_t augment_seed, float* out) const;

  std::string name_;
  std::vector<ImageFile> files_;
  int64_t num_classes_;
  int64_t image_size_;
  Normalization norm_;
  bool train_;
  bool strict_;
  std::unique_ptr<std::atomic<bool>[]> bad_;  // set once a file failed to decode (and was warned about)
};

// Opens options.data_dir as an image folder; InputError naming the path for
// a missing split, a class without images in train, val classes that differ
// from train's (both lists named), or, with strict_data, a bad file.
DatasetSplits openImageFolder(const DatasetOptions& options);

}  // namespace tandem::data
