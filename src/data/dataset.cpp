#include "data/dataset.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "core/error.hpp"
#include "data/cifar_reader.hpp"
#include "data/idx_reader.hpp"
#include "data/in_memory_dataset.hpp"
#include "data/synthetic_dataset.hpp"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFashionDefaultDir = "/usr/share/datasets/fashion-mnist";
constexpr const char* kCifarDefaultDir = "/usr/share/datasets/cifar10";
constexpr int64_t kIdxClasses = 10;

// Published statistics of the training sets; generic IDX data (e.g. MNIST)
// reuses Fashion-MNIST's, which are close enough for grey digits.
const Normalization kFashionNorm{{0.2860f}, {0.3530f}};
const Normalization kCifarNorm{{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};

DatasetPtr openIdxSplit(const std::string& name, const fs::path& dir, const std::string& prefix,
                        bool augment) {
  auto pair = readIdxPair(findIdxFile(dir, prefix + "-images-idx3-ubyte"),
                          findIdxFile(dir, prefix + "-labels-idx1-ubyte"), kIdxClasses);
  return std::make_shared<InMemoryDataset>(name, pair.images, pair.labels, kIdxClasses,
                                           kFashionNorm, augment);
}

DatasetSplits openIdx(const std::string& name, const fs::path& dir, bool augment) {
  return {openIdxSplit(name, dir, "train", augment), openIdxSplit(name, dir, "t10k", false)};
}

DatasetSplits openCifar(const fs::path& root, bool augment) {
  fs::path dir = findCifarDir(root);
  std::vector<torch::Tensor> images;
  std::vector<torch::Tensor> labels;
  for (int b = 1; b <= 5; ++b) {
    // readCifarFile names the missing batch; a partial training set would
    // silently change what "an epoch" means.
    auto part = readCifarFile(dir / fmt::format("data_batch_{}.bin", b));
    images.push_back(part.images);
    labels.push_back(part.labels);
  }
  auto test = readCifarFile(dir / "test_batch.bin");
  return {std::make_shared<InMemoryDataset>("cifar10", torch::cat(images), torch::cat(labels),
                                            kCifarClasses, kCifarNorm, augment),
          std::make_shared<InMemoryDataset>("cifar10", test.images, test.labels, kCifarClasses,
                                            kCifarNorm, false)};
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

std::vector<std::string> datasetNames() { return {"fashion-mnist", "mnist-idx", "cifar10", "synthetic"}; }

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
    return openIdx(name, dir, options.augment);
  }
  if (name == "mnist-idx") {
    if (options.data_dir.empty()) {
      throw InputError("dataset mnist-idx needs a data directory (data_dir) holding the IDX files");
    }
    return openIdx(name, options.data_dir, options.augment);
  }
  if (name == "cifar10") {
    fs::path dir = options.data_dir.empty() ? fs::path(kCifarDefaultDir) : fs::path(options.data_dir);
    return openCifar(dir, options.augment);
  }
  if (name == "synthetic") return openSynthetic(options);
  requireKnownDataset(name);
  throw Error(fmt::format("dataset '{}' is listed but has no reader", name));
}

}  // namespace tandem::data
