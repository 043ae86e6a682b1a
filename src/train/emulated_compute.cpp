#include "train/emulated_compute.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <fstream>
#include <numeric>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"
#include "obs/timeline.hpp"

namespace tandem::train {
namespace {

using Clock = std::chrono::steady_clock;
using torch::autograd::Node;

// When the running backward started: the first emulated layer sets it.
struct BackwardClock {
  bool started = false;
  Clock::time_point start;
  int64_t start_us = 0;  // the same instant on the timeline's clock
  obs::Timeline* timeline = nullptr;  // where each layer's backward is a span, if anywhere
};

// One parameter's backward: waits until its cumulative share of the
// backward time has passed, then hands over its fixed gradient.
// Autograd holds nodes by intrusive pointer from LibTorch 2.15, by
// shared_ptr before (2.11, the GPU machines' image): make them its way.
using NodePtr = decltype(torch::autograd::Edge{}.function);
template <class T, class... Args>
NodePtr makeNode(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

class EmulatedLayerBackward final : public Node {
 public:
  EmulatedLayerBackward(std::shared_ptr<BackwardClock> clock, Clock::duration begin_at, Clock::duration done_at,
                        torch::Tensor gradient, std::string param)
      : clock_(std::move(clock)), begin_at_(begin_at), done_at_(done_at), gradient_(std::move(gradient)),
        param_(std::move(param)) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&&) override {
    if (!clock_->started) {
      clock_->started = true;
      clock_->start = Clock::now();
      clock_->start_us = obs::Timeline::nowUs();
    }
    std::this_thread::sleep_until(clock_->start + done_at_);
    if (obs::Timeline* timeline = clock_->timeline) {
      auto us = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
      timeline->span(param_, obs::Lane::kBackward, clock_->start_us + us(begin_at_), obs::Timeline::nowUs());
    }
    return {gradient_.clone()};  // autograd may accumulate into what it is given
  }
  std::string name() const override { return "EmulatedLayerBackward"; }

 private:
  std::shared_ptr<BackwardClock> clock_;
  Clock::duration begin_at_;
  Clock::duration done_at_;
  torch::Tensor gradient_;
  std::string param_;
};

double number(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number() || !(j[key].get<double>() >= 0)) {
    throw InputError(fmt::format("{}: '{}' must be a non-negative number", path, key));
  }
  return j[key].get<double>();
}

std::string text(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty()) {
    throw InputError(fmt::format("{}: '{}' must be a non-empty string", path, key));
  }
  return j[key].get<std::string>();
}

// The shape of the node's forward output (its gradient's), empty if none.
// InputMetadata keeps the shape private: a zero tensor of it tells it.
std::vector<int64_t> outputSizes(const Node& node) {
  if (node.num_inputs() == 0) return {};
  return node.input_metadata(0).zeros_like().sizes().vec();
}

// Output elements per sample and channel of a forward output: the positions
// a weight is applied at.
double positionsPerSample(const std::vector<int64_t>& sizes, int64_t batch) {
  if (sizes.size() < 2 || sizes[0] != batch) return 1;
  int64_t positions = 1;
  for (size_t d = 2; d < sizes.size(); ++d) positions *= sizes[d];
  return static_cast<double>(positions);
}

}  // namespace

ComputeProfile loadComputeProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("--emulate-compute: cannot read profile {}", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  ComputeProfile p;
  p.path = path;
  p.model = text(j, "model", path);
  p.device = text(j, "device", path);
  p.source = text(j, "source", path);
  p.batch_size = static_cast<int64_t>(number(j, "batch_size", path));
  p.forward_ms = number(j, "forward_ms", path);
  p.backward_ms = number(j, "backward_ms", path);
  if (p.batch_size < 1 || p.backward_ms <= 0) {
    throw InputError(fmt::format("{}: batch_size and backward_ms must be positive", path));
  }
  return p;
}

struct EmulatedCompute::Impl {
  ComputeProfile profile;
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::vector<torch::Tensor> gradients;  // fixed, one per parameter
  std::vector<double> shares;
  std::vector<size_t> backward_order;
  std::vector<Clock::duration> begin_at, done_at;  // by parameter, from the start of backward
};

EmulatedCompute::EmulatedCompute(models::Model& model, ComputeProfile profile, torch::IntArrayRef sample_shape)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.profile = std::move(profile);
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    s.params.push_back(item.value());
    s.names.push_back(item.key() + " backward");
  }
  if (s.params.empty()) throw InputError("--emulate-compute: the model has no trainable parameters");
  std::unordered_map<const void*, size_t> index_of;
  for (size_t i = 0; i < s.params.size(); ++i) index_of[s.params[i].unsafeGetTensorImpl()] = i;

  // The probe: a real forward of two samples (batch norm needs two).
  constexpr int64_t kProbeBatch = 2;
  std::vector<int64_t> shape = {kProbeBatch};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  torch::Tensor out = model.forward(torch::randn(shape)).sum();
  std::vector<double> flops(s.params.size(), 0.0);
  std::vector<uint64_t> first_use(s.params.size(), UINT64_MAX);
  std::unordered_map<const Node*, const Node*> parent;
  std::unordered_set<const Node*> seen;
  std::vector<const Node*> stack = {out.grad_fn().get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges()) {
      const Node* child = edge.function.get();
      if (child == nullptr) continue;
      if (const auto* leaf = dynamic_cast<const torch::autograd::AccumulateGrad*>(child)) {
        auto it = index_of.find(leaf->variable.unsafeGetTensorImpl());
        if (it == index_of.end()) continue;
        // A view of the weight (a transpose before a matmul) shares its
        // size: the layer is the node that consumes the view.
        const Node* layer = node;
        std::vector<int64_t> sizes = outputSizes(*node);
        const int64_t elements = std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<>());
        if (!sizes.empty() && elements == s.params[it->second].numel() && parent.count(node)) {
          layer = parent.at(node);
          sizes = outputSizes(*layer);
        }
        flops[it->second] += 2.0 * static_cast<double>(s.params[it->second].numel()) *
                             positionsPerSample(sizes, kProbeBatch);
        first_use[it->second] = std::min(first_use[it->second], layer->sequence_nr());
        continue;
      }
      parent.emplace(child, node);
      stack.push_back(child);
    }
  }
  const double total = std::accumulate(flops.begin(), flops.end(), 0.0);
  s.shares.resize(s.params.size());
  for (size_t i = 0; i < flops.size(); ++i) s.shares[i] = total > 0 ? flops[i] / total : 1.0 / flops.size();
  // Backward meets the layers in the reverse of their forward order.
  s.backward_order.resize(s.params.size());
  std::iota(s.backward_order.begin(), s.backward_order.end(), size_t{0});
  std::stable_sort(s.backward_order.begin(), s.backward_order.end(),
                   [&](size_t a, size_t b) { return first_use[a] > first_use[b]; });
  s.done_at.resize(s.params.size());
  s.begin_at.resize(s.params.size());
  double elapsed_ms = 0;
  for (size_t i : s.backward_order) {
    s.begin_at[i] = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(elapsed_ms));
    elapsed_ms += s.shares[i] * s.profile.backward_ms;
    s.done_at[i] = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(elapsed_ms));
  }
  // Small, fixed and different per parameter, so that reductions can be
  // checked exactly and the parameters still move.
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.gradients.push_back(torch::full_like(s.params[i], 1e-4 * static_cast<double>(i % 7 + 1)).detach());
  }
}

EmulatedCompute::~EmulatedCompute() = default;

torch::Tensor EmulatedCompute::forward(const ParameterGate& gate, obs::Timeline* timeline) {
  Impl& s = *impl_;
  const int64_t start_us = obs::Timeline::nowUs();
  // An absolute schedule, so that sleeps' overshoots do not add up; a gate
  // that waits moves the rest of the forward later.
  Clock::time_point due = Clock::now();
  size_t asked = 0;
  for (auto it = s.backward_order.rbegin(); it != s.backward_order.rend(); ++it) {
    if (gate && *it + 1 > asked) {
      std::this_thread::sleep_until(due);  // the layer is reached now
      asked = *it + 1;
      const auto asked_at = Clock::now();
      gate(asked);
      due += Clock::now() - asked_at;  // not the sleep's overshoot: that would add up
    }
    due += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(s.shares[*it] * s.profile.forward_ms));
  }
  std::this_thread::sleep_until(due);
  if (timeline != nullptr) timeline->span("forward (emulated)", obs::Lane::kBackward, start_us, obs::Timeline::nowUs());
  auto clock = std::make_shared<BackwardClock>();
  clock->timeline = timeline;
  std::vector<torch::Tensor> outputs;
  // Created in forward order: autograd runs the later ones first.
  for (auto it = s.backward_order.rbegin(); it != s.backward_order.rend(); ++it) {
    const size_t i = *it;
    auto node = makeNode<EmulatedLayerBackward>(clock, s.begin_at[i], s.done_at[i], s.gradients[i], s.names[i]);
    node->set_next_edges(torch::autograd::collect_next_edges(s.params[i]));
    torch::Tensor output = torch::zeros({});
    torch::autograd::create_gradient_edge(output, node);
    outputs.push_back(output);
  }
  return torch::stack(outputs).sum();
}

const ComputeProfile& EmulatedCompute::profile() const { return impl_->profile; }
const std::vector<double>& EmulatedCompute::backwardShares() const { return impl_->shares; }
const std::vector<size_t>& EmulatedCompute::backwardOrder() const { return impl_->backward_order; }

}  // namespace tandem::train
