#pragma once
// Datasets hand out whole, ready-to-train float batches so that the
// prefetcher threads do all per-sample work off the training thread.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem::data {

struct Batch {
  torch::Tensor inputs;   // float32 [N, C, H, W], normalised (and augmented for training)
  torch::Tensor targets;  // int64 [N]
};

struct SampleShape {
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  virtual SampleShape shape() const = 0;
  virtual int64_t numClasses() const = 0;
  // Assembles the samples at `indices`. Augmentation, when enabled, draws
  // its randomness only from (augment_seed, index), so a batch is the same
  // whichever thread builds it and whenever. Thread-safe (const).
  virtual Batch getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const = 0;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

struct DatasetOptions {
  std::string name = "fashion-mnist";  // fashion-mnist | mnist-idx | cifar10 | synthetic
  std::string data_dir;                // empty: the dataset's default location
  bool augment = false;                // pad-4 random crop + horizontal flip (training split only)
  // synthetic only
  SampleShape synthetic_shape{3, 32, 32};
  int64_t synthetic_classes = 10;
  int64_t synthetic_train_size = 8192;
  int64_t synthetic_test_size = 1024;
  uint64_t synthetic_seed = 1234;
};

struct DatasetSplits {
  DatasetPtr train;
  DatasetPtr test;
};

// Opens the train and test splits. Throws InputError naming the file and the
// problem for a missing file, wrong magic, truncation, a label out of range,
// or mismatched image/label counts; and naming the option for an unknown
// dataset name or a bad synthetic shape.
DatasetSplits openDataset(const DatasetOptions& options);

// Names accepted by openDataset, for --help and errors.
std::vector<std::string> datasetNames();

// Throws InputError naming `name` and listing the known datasets unless
// openDataset accepts it.
void requireKnownDataset(const std::string& name);

}  // namespace tandem::data
