// Multi-layer perceptron over the flattened input; the default 256-4096-4096-256
// shape is the communication-bound workload (large dense layers, little compute).
#include "core/error.hpp"
#include "models/builders.hpp"
#include "models/shape_check.hpp"

namespace tandem::models::detail {

namespace {

class Mlp final : public Model {
 public:
  Mlp(const InputSpec& input, const std::vector<int64_t>& widths) {
    int64_t in = input.channels * input.height * input.width;
    for (int64_t width : widths) {
      layers_->push_back(torch::nn::Linear(in, width));
      layers_->push_back(torch::nn::ReLU());
      in = width;
    }
    layers_->push_back(torch::nn::Linear(in, input.num_classes));
    register_module("layers", layers_);
  }

  bool gatesStages() const override { return true; }


  torch::Tensor forward(torch::Tensor x) override { return forwardStages(layers_, x.flatten(1)); }

 private:
  torch::nn::Sequential layers_;
};

}  // namespace

ModelPtr makeMlp(const InputSpec& input, const ModelOptions& options) {
  checkInput("mlp", input, [](int64_t side) { return side; });
  for (int64_t width : options.mlp_widths) {
    if (width < 1) {
      throw InputError(fmt::format("model 'mlp': hidden widths must be positive, got {}", width));
    }
  }
  return std::make_shared<Mlp>(input, options.mlp_widths);
}

}  // namespace tandem::models::detail
