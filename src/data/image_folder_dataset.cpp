#include "data/image_folder_dataset.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <thread>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "data/image_decode.hpp"
#include "data/image_transform.hpp"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxImageSize = 4096;
// Warnings name this many bad files each; the rest are counted, so a
// folder of junk does not flood the log.
constexpr size_t kMaxNamedBadFiles = 20;
// The startup log lists this many classes by name (ImageNet has 1000).
constexpr size_t kMaxLoggedClasses = 50;

bool hasImageExtension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::vector<std::string> classDirs(const fs::path& split) {
  std::error_code ec;
  if (!fs::is_directory(split, ec)) {
    throw InputError(fmt::format("{}: missing directory: an image folder holds train/<class>/ and val/<class>/ "
                                 "subdirectories of .jpg/.jpeg/.png files",
                                 split.string()));
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(split, ec)) {
    const std::string name = entry.path().filename().string();
    // Hidden directories (.ipynb_checkpoints, .git) are never classes.
    if (!name.empty() && name[0] != '.' && entry.is_directory(ec)) names.push_back(name);
  }
  if (ec) throw InputError(fmt::format("{}: cannot list: {}", split.string(), ec.message()));
  if (names.empty()) throw InputError(fmt::format("{}: no class subdirectories", split.string()));
  std::sort(names.begin(), names.end());
  return names;
}

struct Listing {
  std::vector<ImageFile> files;
  size_t ignored = 0;  // files without an image extension
  std::string ignored_example;
};

// Every image file under each class directory (recursively, as torchvision
// walks), sorted by path within a class so the order is the same on every host.
Listing listFiles(const fs::path& split, const std::vector<std::string>& classes) {
  Listing out;
  for (size_t label = 0; label < classes.size(); ++label) {
    const fs::path dir = split / classes[label];
    std::vector<std::string> paths;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      if (hasImageExtension(it->path())) {
        paths.push_back(it->path().string());
      } else if (out.ignored++ == 0) {
        out.ignored_example = it->path().string();
      }
    }
    if (ec) throw InputError(fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
    std::sort(paths.begin(), paths.end());
    for (auto& p : paths) out.files.push_back({std::move(p), static_cast<int64_t>(label)});
  }
  return out;
}

// Header checks run on a few threads: at open they are all the I/O there is.
std::vector<std::string> probeAll(const std::vector<ImageFile>& files) {
  std::vector<std::string> errors(files.size());
  const size_t threads = std::clamp<size_t>(files.size() / 64, 1, std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ImageInfo info;
      for (size_t i = t; i < files.size(); i += threads) {
        if (!probeImageFile(files[i].path, info, errors[i]) && errors[i].empty()) errors[i] = "unreadable";
      }
    });
  }
  for (auto& th : pool) th.join();
  return errors;
}

// Drops files whose header does not parse: one warning each, or an error
// with strict_data. Then every training class must still have an image.
std::vector<ImageFile> keepReadable(const fs::path& split, Listing listing, const std::vector<std::string>& classes,
                                    bool strict, bool need_every_class) {
  if (listing.ignored > 0) {
    TANDEM_LOG_INFO("{}: ignored {} file(s) without a .jpg/.jpeg/.png extension, e.g. {}", split.string(),
                    listing.ignored, listing.ignored_example);
  }
  const auto errors = probeAll(listing.files);
  std::vector<ImageFile> kept;
  std::vector<int64_t> per_class(classes.size(), 0);
  size_t bad = 0;
  for (size_t i = 0; i < listing.files.size(); ++i) {
    auto& file = listing.files[i];
    if (errors[i].empty()) {
      ++per_class[static_cast<size_t>(file.label)];
      kept.push_back(std::move(file));
      continue;
    }
    if (strict) {
      throw InputError(fmt::format("{}: corrupt or not an image: {} (--strict-data; without it the file is "
                                   "skipped with a warning)",
                                   file.path, errors[i]));
    }
    if (bad++ < kMaxNamedBadFiles) TANDEM_LOG_WARN("{}: skipped, corrupt or not an image: {}", file.path, errors[i]);
  }
  if (bad > kMaxNamedBadFiles) {
    TANDEM_LOG_WARN("{}: {} more corrupt or non-image files skipped", split.string(), bad - kMaxNamedBadFiles);
  }
  for (size_t c = 0; c < classes.size(); ++c) {
    if (need_every_class && per_class[c] == 0) {
      throw InputError(fmt::format("{}: class '{}' has no readable .jpg/.jpeg/.png image", (split / classes[c]).string(),
                                   classes[c]));
    }
  }
  if (kept.empty()) throw InputError(fmt::format("{}: no readable .jpg/.jpeg/.png image", split.string()));
  return kept;
}

std::string classList(const std::vector<std::string>& classes) {
  std::vector<std::string> items;
  for (size_t i = 0; i < classes.size() && i < kMaxLoggedClasses; ++i) items.push_back(fmt::format("{}={}", classes[i], i));
  std::string text = fmt::format("{}", fmt::join(items, ", "));
  if (classes.size() > kMaxLoggedClasses) {
    text += fmt::format(", ... ({} more, the last {}={})", classes.size() - kMaxLoggedClasses, classes.back(),
                        classes.size() - 1);
  }
  return text;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(std::string name, std::vector<ImageFile> files, int64_t num_classes,
                                       int64_t image_size, Normalization norm, bool train, bool strict)
    : name_(std::move(name)),
      files_(std::move(files)),
      num_classes_(num_classes),
      image_size_(image_size),
      norm_(std::move(norm)),
      train_(train),
      strict_(strict),
      bad_(std::make_unique<std::atomic<bool>[]>(files_.size())) {
  TANDEM_ENFORCE(!files_.empty(), "an image folder split needs files");
  TANDEM_ENFORCE(image_size_ > 0 && image_size_ <= kMaxImageSize, "image size {}", image_size_);
}

bool ImageFolderDataset::loadSample(int64_t index, int64_t draw_index, uint64_t augment_seed, float* out) const {
  const auto& file = files_[static_cast<size_t>(index)];
  DecodedImage image;
  std::string error;
  if (!decodeImageFile(file.path, image, error)) {
    if (strict_) {
      throw InputError(fmt::format("{}: cannot decode: {} (--strict-data; without it the file is replaced by "
                                   "another sample with a warning)",
                                   file.path, error));
    }
    if (!bad_[static_cast<size_t>(index)].exchange(true)) {
      TANDEM_LOG_WARN("{}: cannot decode ({}); the next image of the split stands in for it for the rest of the run",
                      file.path, error);
    }
    return false;
  }
  if (train_) {
    // Keyed by the requested index, so a stand-in sample is drawn as the original would be.
    const ImageDraw draw = drawRandomResizedCrop(image.height, image.width, augment_seed, draw_index);
    resampleNormalized(image, draw.box, draw.flip, image_size_, norm_, out);
  } else {
    resampleNormalized(image, centerCropBox(image.height, image.width, image_size_), false, image_size_, norm_, out);
  }
  return true;
}

Batch ImageFolderDataset::getBatch(std::span<const int64_t> indices, uint64_t augment_seed) const {
  const int64_t n = size();
  const auto count = static_cast<int64_t>(indices.size());
  Batch batch;
  batch.inputs = torch::empty({count, 3, image_size_, image_size_}, torch::kFloat);
  batch.targets = torch::empty({count}, torch::kLong);
  float* out = batch.inputs.data_ptr<float>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  const int64_t sample = 3 * image_size_ * image_size_;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = indices[static_cast<size_t>(k)];
    TANDEM_ENFORCE(i >= 0 && i < n, "index {} out of range for {} ({} samples)", i, name_, n);
    // Whether a file decodes is a property of the file, so the stand-in
    // chosen is the same on every run and thread.
    int64_t j = i;
    int64_t tried = 0;
    while (tried < n && (bad_[static_cast<size_t>(j)].load() || !loadSample(j, i, augment_seed, out + k * sample))) {
      j = (j + 1) % n;
      ++tried;
    }
    if (tried == n) throw InputError(fmt::format("{}: no image of this split decodes", name_));
    targets[k] = files_[static_cast<size_t>(j)].label;
  }
  return batch;
}

DatasetSplits openImageFolder(const DatasetOptions& options) {
  if (options.data_dir.empty()) {
    throw InputError("dataset imagefolder needs --data-dir DIR holding train/<class>/ and val/<class>/ image "
                     "directories");
  }
  if (options.image_size <= 0 || options.image_size > kMaxImageSize) {
    throw InputError(fmt::format("--image-size: must be in [1, {}], got {}", kMaxImageSize, options.image_size));
  }
  const fs::path dir(options.data_dir);
  const auto classes = classDirs(dir / "train");
  const auto val_classes = classDirs(dir / "val");
  if (classes != val_classes) {
    throw InputError(fmt::format("{}: class directories [{}] differ from {}'s [{}]; val must have train's classes",
                                 (dir / "val").string(), fmt::join(val_classes, ", "), (dir / "train").string(),
                                 fmt::join(classes, ", ")));
  }
  auto norm = resolveNormalization(options, 3, imagenetNormalization);
  auto train = keepReadable(dir / "train", listFiles(dir / "train", classes), classes, options.strict_data, true);
  auto val = keepReadable(dir / "val", listFiles(dir / "val", classes), classes, options.strict_data, false);
  const auto num_classes = static_cast<int64_t>(classes.size());
  TANDEM_LOG_INFO("imagefolder {}: {} classes: {}", dir.string(), num_classes, classList(classes));
  TANDEM_LOG_INFO("imagefolder {}: {} training and {} validation images at {}x{}, normalisation {}", dir.string(),
                  train.size(), val.size(), options.image_size, options.image_size, describe(norm));
  return {std::make_shared<ImageFolderDataset>("imagefolder", std::move(train), num_classes, options.image_size,
                                               norm, true, options.strict_data),
          std::make_shared<ImageFolderDataset>("imagefolder", std::move(val), num_classes, options.image_size, norm,
                                               false, options.strict_data)};
}

}  // namespace tandem::data
