// Tandem's own training loop (tandem::fit) over a user-defined model, data
// held in tensors, and a loss of the user's own: checkpoints, resume,
// metrics.jsonl, TensorBoard events and the step breakdown come with it.
//
//   ./my_fit --steps 200 --out runs/fit                                  alone
//   tandem launch --workers 2 -- ./my_fit --steps 200 --out runs/fit     all-reduce
//   tandem launch --ps 1 --workers 2 -- ./my_fit --out runs/fit-ps       parameter server
#include <tandem/trainer.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

struct Net : torch::nn::Module {
  Net() : fc1(register_module("fc1", torch::nn::Linear(20, 64))), fc2(register_module("fc2", torch::nn::Linear(64, 2))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};

// Which half of the features sums larger: a task with a known answer.
tandem::TensorData makeData(int64_t size, uint64_t seed) {
  auto gen = torch::make_generator<torch::CPUGeneratorImpl>(seed);
  torch::Tensor x = torch::randn({size, 20}, gen);
  torch::Tensor y = (x.narrow(1, 0, 10).sum(1) > x.narrow(1, 10, 10).sum(1)).to(torch::kLong);
  return {x, y};
}

int main(int argc, char** argv) {
  tandem::TrainerOptions options;
  options.name = "my-fit-net";
  options.max_steps = 200;
  options.batch_size = 32;
  options.out_dir = "runs/my-fit";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") options.max_steps = std::atoll(argv[i + 1]);
    else if (flag == "--out") options.out_dir = argv[i + 1];
    else if (flag == "--optimizer") options.optimizer = argv[i + 1];
    else if (flag == "--lr") options.lr = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: my_fit [--steps N] [--out DIR] [--optimizer sgd|adam|adamw|rmsprop] [--lr LR]\n");
      return 2;
    }
  }
  // Cross-entropy with label smoothing, written by hand: any loss works.
  auto smoothed = [](const torch::Tensor& logits, const torch::Tensor& targets) {
    auto log_p = torch::log_softmax(logits, 1);
    auto one_hot = torch::one_hot(targets, logits.size(1)).to(log_p.dtype());
    return -((one_hot * 0.9 + 0.1 / logits.size(1)) * log_p).sum(1).mean();
  };
  try {
    torch::manual_seed(7);
    auto net = std::make_shared<Net>();
    const std::string summary = tandem::fit(
        net, [&net](const torch::Tensor& x) { return net->forward(x); }, makeData(4096, 1), makeData(1024, 2),
        smoothed, options);
    std::printf("%s\n", summary.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "my_fit: %s\n", e.what());
    return 1;
  }
  return 0;
}
