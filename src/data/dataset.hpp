#pragma once
// Datasets hand out whole, ready-to-train float batches so that the
// prefetcher threads do all per-sample work off the training thread.
#include <torch/torch.h>

#include "data/dataset_options.hpp"

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
