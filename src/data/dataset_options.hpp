#pragma once
// What a run asks of its data, without torch: the run config (and with it
// the torch-free PS task) includes only this.
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

struct SampleShape {
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
};

struct DatasetOptions {
  // fashion-mnist | mnist-idx | cifar10 | cifar100 | imagefolder | synthetic
  std::string name = "fashion-mnist";
  std::string data_dir;                // empty: the dataset's default location
  bool augment = false;                // pad-4 random crop + horizontal flip (IDX/CIFAR training split only)
  // Per-channel statistics of pixel/255. Empty: computed from the training
  // set (IDX, CIFAR) or ImageNet's (imagefolder).
  std::vector<float> normalize_mean;
  std::vector<float> normalize_std;
  // imagefolder only. The dataset opens before the model, so it cannot ask
  // the model for its input size: 224 is what the ImageNet models expect.
  int64_t image_size = 224;
  // imagefolder: a corrupt or non-image file is an error, not a skip.
  bool strict_data = false;
  // synthetic only
  SampleShape synthetic_shape{3, 32, 32};
  int64_t synthetic_classes = 10;
  int64_t synthetic_train_size = 8192;
  int64_t synthetic_test_size = 1024;
  uint64_t synthetic_seed = 1234;
};

}  // namespace tandem::data
