// A hand-written LibTorch training loop with Tandem underneath: the model is
// the user's own class, the loop is the user's own, and Tandem averages the
// gradients over however many workers `tandem launch` (or torchrun, mpirun,
// srun) started, or parameter servers run the optimizer (--mode ps-sync,
// ps-async, ps-ssp). With one process it is plain LibTorch training.
//
//   tandem launch --workers 2 -- ./my_trainer --steps 100 --global-batch 64
//   tandem launch --ps 1 --workers 2 -- ./my_trainer --mode ps-async
#include <tandem/tandem.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

struct Net : torch::nn::Module {
  Net() : fc1(register_module("fc1", torch::nn::Linear(20, 64))), fc2(register_module("fc2", torch::nn::Linear(64, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};

// Every rank builds the same global batch for a step, and trains on its
// contiguous slice of it: together they cover the batch exactly once.
std::pair<torch::Tensor, torch::Tensor> globalBatch(int64_t step, int64_t size) {
  auto gen = torch::make_generator<torch::CPUGeneratorImpl>(1000 + step);
  torch::Tensor x = torch::randn({size, 20}, gen);
  torch::Tensor y = (x.narrow(1, 0, 10).sum(1) > x.narrow(1, 10, 10).sum(1)).to(torch::kLong);
  return {x, y};
}

int main(int argc, char** argv) {
  int64_t steps = 100;
  int64_t global_batch = 64;
  tandem::DistributedOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") steps = std::atoll(argv[i + 1]);
    else if (flag == "--global-batch") global_batch = std::atoll(argv[i + 1]);
    else if (flag == "--mode" && std::string(argv[i + 1]) == "allreduce") options.mode = tandem::Mode::AllReduce;
    else if (flag == "--mode" && std::string(argv[i + 1]) == "ps-sync") options.mode = tandem::Mode::PsSync;
    else if (flag == "--mode" && std::string(argv[i + 1]) == "ps-async") options.mode = tandem::Mode::PsAsync;
    else if (flag == "--mode" && std::string(argv[i + 1]) == "ps-ssp") options.mode = tandem::Mode::Ssp;
    else {
      std::fprintf(stderr, "usage: my_trainer [--steps N] [--global-batch B] [--mode allreduce|ps-sync|ps-async|ps-ssp]\n");
      return 2;
    }
  }
  try {
    tandem::init();
    if (global_batch % tandem::size() != 0) {
      std::fprintf(stderr, "--global-batch %lld must divide by the %d workers\n", static_cast<long long>(global_batch),
                   tandem::size());
      return 2;
    }
    torch::manual_seed(static_cast<uint64_t>(tandem::rank()) + 7);  // deliberately different...
    auto net = std::make_shared<Net>();
    tandem::broadcast_parameters(*net, 0);  // ...until rank 0's weights are everyone's
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    tandem::DistributedOptimizer optimizer(sgd, *net, options);

    const int64_t local = global_batch / tandem::size();
    for (int64_t step = 1; step <= steps; ++step) {
      auto [x, y] = globalBatch(step, global_batch);
      auto mine_x = x.narrow(0, tandem::rank() * local, local);
      auto mine_y = y.narrow(0, tandem::rank() * local, local);
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(net->forward(mine_x), mine_y);
      loss.backward();
      optimizer.step();
      torch::Tensor mean_loss = loss.detach().clone();
      tandem::allreduce(mean_loss);  // the global batch's loss, for the log
      if (tandem::rank() == 0 && (step % 10 == 0 || step == 1)) {
        std::printf("step %lld loss %.6f\n", static_cast<long long>(step), mean_loss.item<double>());
      }
    }
    optimizer.finish();  // PS modes: the chief pulls every worker's last update
    double checksum = 0;
    for (const auto& p : net->parameters()) checksum += p.to(torch::kFloat64).abs().sum().item<double>();
    std::printf("rank %d of %d (local %d of %d) checksum %.12g\n", tandem::rank(), tandem::size(),
                tandem::local_rank(), tandem::local_size(), checksum);
    tandem::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "my_trainer: %s\n", e.what());
    return 1;
  }
  return 0;
}
