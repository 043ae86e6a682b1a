#include "data/dataset.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "data/cifar_reader.hpp"
#include "data/idx_reader.hpp"
#include "data/image_folder_dataset.hpp"
#include "data/in_memory_dataset.hpp"
#include "data/labels.hpp"
#include "data/normalization.hpp"
#include "data/synthetic_dataset.hpp"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFashionDefaultDir = "/usr/share/datasets/fashion-mnist";
constexpr const char* kCifarDefaultDir = "/usr/share/datasets/cifar10";
constexpr const char* kCifar100DefaultDir = "/usr/share/datasets/cifar100";

// Both splits normalised with the training set's statistics (or the
// flags'); the class count is the training labels' unless the format fixes
// it, and the test labels must fall within it.
DatasetSplits makeSplits(const std::string& name, const DatasetOptions& options, const LabelledImages& train,
                         const fs::path& train_labels, const LabelledImages& test, const fs::path& test_labels,
                         int64_t known_classes) {
  int64_t classes = known_classes;
  std::string source = "the format's class count";
  if (classes == 0) {
    classes = classCountOf(train.labels, train_labels);
    source = fmt::format("{} holds labels up to {}", train_labels.filename().string(), classes - 1);
  } else {
    checkLabelRange(train.labels, classes, train_labels, source);
  }
  checkLabelRange(test.labels, classes, test_labels, source);
  const int64_t channels = train.images.size(1);
  const bool computed = options.normalize_mean.empty() || options.normalize_std.empty();
  auto norm = resolveNormalization(options, channels, [&] { return computeNormalization(train.images); });
  TANDEM_LOG_INFO("{}: {} classes, normalisation {}{}", name, classes, describe(norm),
                  computed ? " (computed from the training set where not given)" : "");
  return {std::make_shared<InMemoryDataset>(name, train.images, train.labels, classes, norm, options.augment),
          std::make_shared<InMemoryDataset>(name, test.images, test.labels, classes, norm, false)};
}

DatasetSplits openIdx(const std::string& name, const fs::path& dir, const DatasetOptions& options) {
  // The training split is read (and its errors reported) before the test split is looked for.
  const auto train_labels = findIdxFile(dir, "train-labels-idx1-ubyte");
  auto train = readIdxPair(findIdxFile(dir, "train-images-idx3-ubyte"), train_labels);
  const auto test_labels = findIdxFile(dir, "t10k-labels-idx1-ubyte");
  auto test = readIdxPair(findIdxFile(dir, "t10k-images-idx3-ubyte"), test_labels);
  return makeSplits(name, options, train, train_labels, test, test_labels, 0);
}

DatasetSplits openCifar(const fs::path& root, const DatasetOptions& options) {
  fs::path dir = findCifarDir(root, kCifar10);
  std::vector<torch::Tensor> images;
  std::vector<torch::Tensor> labels;
  for (int b = 1; b <= 5; ++b) {
    // readCifarFile names the missing batch; a partial training set would
    // silently change what "an epoch" means.
    auto part = readCifarFile(dir / fmt::format("data_batch_{}.bin", b), kCifar10);
    images.push_back(part.images);
    labels.push_back(part.labels);
  }
  LabelledImages train{torch::cat(images), torch::cat(labels)};
  const auto test_path = dir / kCifar10.test_file;
  auto test = readCifarFile(test_path, kCifar10);
  return makeSplits("cifar10", options, train, dir / "data_batch_*.bin", test, test_path, 0);
}

DatasetSplits openCifar100(const fs::path& root, const DatasetOptions& options) {
  fs::path dir = findCifarDir(root, kCifar100);
  const auto train_path = dir / "train.bin";
  const auto test_path = dir / kCifar100.test_file;
  auto train = readCifarFile(train_path, kCifar100);
  auto test = readCifarFile(test_path, kCifar100);
  return makeSplits("cifar100", options, train, train_path, test, test_path, kCifar100Classes);
}

void checkPositive(const char* option, int64_t value) {
  if (value <= 0) {
    throw InputError(fmt::format("synthetic dataset: {} must be positive, got {}", option, value));
  }
}

DatasetSplits openSynthetic(const DatasetOptions& o) {
  checkPositive("synthetic_shape.channels", o.synthetic_shape.channels);
  checkPositive("synthetic_shape.height", o.synthetic_shape.height);
  checkPositive("synthetic_shape.width", o.synthetic_shape.width);
  checkPositive("synthetic_classes", o.synthetic_classes);
  checkPositive("synthetic_train_size", o.synthetic_train_size);
  checkPositive("synthetic_test_size", o.synthetic_test_size);
  return {std::make_shared<SyntheticDataset>(o.synthetic_shape, o.synthetic_classes,
                                             o.synthetic_train_size, o.synthetic_seed, 0,
                                             o.augment),
          std::make_shared<SyntheticDataset>(o.synthetic_shape, o.synthetic_classes,
                                             o.synthetic_test_size, o.synthetic_seed, 1, false)};
}

}  // namespace

std::vector<std::string> datasetNames() {
  return {"fashion-mnist", "mnist-idx", "cifar10", "cifar100", "imagefolder", "synthetic"};
}

void requireKnownDataset(const std::string& name) {
  auto names = datasetNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    throw InputError(fmt::format("unknown dataset '{}'; known datasets: {}", name, fmt::join(names, ", ")));
  }
}

DatasetSplits openDataset(const DatasetOptions& options) {
  const std::string& name = options.name;
  if (name == "fashion-mnist") {
    fs::path dir = options.data_dir.empty() ? fs::path(kFashionDefaultDir) : fs::path(options.data_dir);
    return openIdx(name, dir, options);
  }
  if (name == "mnist-idx") {
    if (options.data_dir.empty()) {
      throw InputError("dataset mnist-idx needs a data directory (data_dir) holding the IDX files");
    }
    return openIdx(name, options.data_dir, options);
  }
  if (name == "cifar10") {
    fs::path dir = options.data_dir.empty() ? fs::path(kCifarDefaultDir) : fs::path(options.data_dir);
    return openCifar(dir, options);
  }
  if (name == "cifar100") {
    fs::path dir = options.data_dir.empty() ? fs::path(kCifar100DefaultDir) : fs::path(options.data_dir);
    return openCifar100(dir, options);
  }
  if (name == "imagefolder") return openImageFolder(options);
  if (name == "synthetic") return openSynthetic(options);
  requireKnownDataset(name);
  throw Error(fmt::format("dataset '{}' is listed but has no reader", name));
}

}  // namespace tandem::data
