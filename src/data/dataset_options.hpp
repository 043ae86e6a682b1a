#pragma once
// What a run asks of its data, without torch: the run config (and with it
// the torch-free PS task) includes only this.
#include <cstdint>
#include <string>

namespace tandem::data {

struct SampleShape {
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
};

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

}  // namespace tandem::data
