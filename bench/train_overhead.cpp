// Tandem standalone vs a bare LibTorch loop on the same model, batch size
// and thread count: the ratio of samples/s is Tandem's per-step overhead
// (input pipeline, timing, metrics). Both run in this process, alternating,
// so machine drift hits both alike.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>

#include "core/clock.hpp"
#include "core/logging.hpp"
#include "data/dataset.hpp"
#include "models/registry.hpp"
#include "train/model_for_dataset.hpp"
#include "train/optimizer.hpp"
#include "train/trainer.hpp"

namespace {

// The loop a user would write by hand: batches already in memory, no
// prefetching, no metrics. Every step gets a distinct batch, as in Tandem:
// cycling a few batches overfits them, and the resulting denormal gradients
// make the bare loop several times slower than it should be.
double bareSamplesPerSec(const tandem::train::TrainConfig& c, const tandem::data::DatasetPtr& train, int64_t steps) {
  torch::manual_seed(c.seed);
  auto model = tandem::train::createModelFor(c, *train);
  // The same optimizer through torch::optim, as a hand-written loop uses it.
  auto optimizer_ptr = tandem::train::makeOptimizer(c.optimizer, model->parameters());
  auto& optimizer = *optimizer_ptr;
  std::vector<tandem::data::Batch> batches;
  for (int64_t i = 0; i < steps + 3; ++i) {
    std::vector<int64_t> idx(static_cast<size_t>(c.batch_size));
    for (int64_t j = 0; j < c.batch_size; ++j) idx[static_cast<size_t>(j)] = (i * c.batch_size + j) % train->size();
    batches.push_back(train->getBatch(idx, 0));
  }
  auto step = [&](const tandem::data::Batch& b) {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(b.inputs), b.targets).backward();
    optimizer.step();
  };
  for (int i = 0; i < 3; ++i) step(batches[static_cast<size_t>(i) % batches.size()]);  // warm-up
  tandem::Stopwatch watch;
  for (int64_t i = 0; i < steps; ++i) step(batches[static_cast<size_t>(i) % batches.size()]);
  return static_cast<double>(steps * c.batch_size) / watch.elapsed();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tandem standalone vs bare LibTorch: samples/s ratio"};
  std::vector<std::string> models{"cnn", "resnet20", "mlp"};
  int64_t steps = 60;
  int threads = 2;
  int repeats = 2;
  app.add_option("--models", models)->delimiter(',');
  app.add_option("--steps", steps);
  app.add_option("--threads", threads);
  app.add_option("--repeats", repeats, "alternating bare/tandem pairs per model");
  std::string optimizer = "sgd";
  app.add_option("--optimizer", optimizer, "sgd (momentum 0.9) or adam, in both loops");
  CLI11_PARSE(app, argc, argv);
  tandem::configureLogging("warn");
  torch::set_num_threads(threads);
  auto out = std::filesystem::temp_directory_path() / "tandem-bench-overhead";

  fmt::print("{:<10} {:>6} {:>14} {:>14} {:>8}\n", "model", "batch", "bare samp/s", "tandem samp/s", "ratio");
  for (const auto& name : models) {
    tandem::train::TrainConfig c;
    c.model = name;
    c.optimizer.name = optimizer;
    if (optimizer == "adam") c.optimizer.lr = 1e-4;
    c.threads = threads;
    c.max_steps = steps;
    c.log_every_steps = steps;
    c.eval_every_steps = 1 << 30;  // no evaluation inside the timed run
    c.out_dir = out.string();
    c.overwrite = true;  // every repeat is a fresh run, not a resume of the last
    c.dataset.name = "fashion-mnist";
    c.batch_size = 64;
    if (name == "mlp") {
      c.dataset.name = "synthetic";
      c.dataset.synthetic_shape = {256, 1, 1};
      c.dataset.synthetic_classes = 256;
      c.batch_size = 128;
    } else if (name.rfind("resnet", 0) == 0) {
      c.dataset.name = "synthetic";
      c.dataset.synthetic_shape = {3, 32, 32};
      c.batch_size = 32;
    }
    c.eval_batch_size = 64;
    c.dataset.synthetic_test_size = 64;
    auto splits = tandem::data::openDataset(c.dataset);
    double bare = 0, ours = 0;
    for (int r = 0; r < repeats; ++r) {
      double b = bareSamplesPerSec(c, splits.train, steps);
      tandem::cluster::JobContext context;
      tandem::train::Trainer trainer(c, std::make_unique<tandem::train::StandaloneStrategy>(), context);
      const auto summary = trainer.run();
      const double t = summary.at("samples_per_sec").get<double>();
      const auto& phases = summary.at("step_breakdown");
      fmt::print(stderr, "  {} repeat {}: bare {:.0f} tandem {:.0f} (tandem step {:.1f} ms: forward+backward {:.1f}, "
                 "update {:.1f}, input wait {:.2f})\n",
                 name, r, b, t, 1e3 * phases.at("step").get<double>(), 1e3 * phases.at("forward_backward").get<double>(),
                 1e3 * phases.at("update").get<double>(), 1e3 * phases.at("input_wait").get<double>());
      bare += b;
      ours += t;
    }
    fmt::print("{:<10} {:>6} {:>14.0f} {:>14.0f} {:>8.3f}\n", name, c.batch_size, bare / repeats, ours / repeats,
               ours / bare);
  }
  std::filesystem::remove_all(out);
  return 0;
}
