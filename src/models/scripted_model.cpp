#include "models/scripted_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "core/error.hpp"
#include "core/fnv1a.hpp"

namespace tandem::models {
namespace {

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first line of a torch error: the rest is a C++ or TorchScript trace.
std::string firstLine(const c10::Error& e) {
  std::string text = e.what_without_backtrace();
  return text.substr(0, text.find('\n'));
}

// Registers `from`'s own parameters and buffers (the same tensors) on `to`,
// then its children under their names, so dotted names match the module's.
void mirror(const torch::jit::Module& from, torch::nn::Module& to, const std::string& prefix,
            std::map<const void*, std::string>& seen, const std::string& path) {
  for (const auto& p : from.named_parameters(/*recurse=*/false)) {
    if (!p.value.defined()) continue;
    const std::string name = prefix + p.name;
    // A tied weight would be captured, reduced and updated twice per step.
    if (auto [it, fresh] = seen.emplace(p.value.unsafeGetTensorImpl(), name); !fresh) {
      throw InputError(fmt::format("{}: parameters '{}' and '{}' are the same tensor (tied weights), which Tandem "
                                   "does not train yet",
                                   path, it->second, name));
    }
    to.register_parameter(p.name, p.value, p.value.requires_grad());
  }
  for (const auto& b : from.named_buffers(/*recurse=*/false)) {
    if (b.value.defined()) to.register_buffer(b.name, b.value);
  }
  for (const auto& child : from.named_children()) {
    auto holder = std::make_shared<torch::nn::Module>();
    mirror(child.value, *holder, prefix + child.name + ".", seen, path);
    to.register_module(child.name, holder);
  }
}

}  // namespace

bool isModelFile(const std::string& name) {
  return name.find('/') != std::string::npos || endsWith(name, ".pt") || endsWith(name, ".pth") ||
         endsWith(name, ".ts") || endsWith(name, ".torchscript");
}

void requireModelFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(fmt::format("--model {}: no such TorchScript file (save one from Python with "
                                 "torch.jit.save(torch.jit.script(model), '{}'))",
                                 path, path));
  }
}

std::string modelFileDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("--model {}: cannot open for reading", path));
  Fnv1a hash;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hash.add(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw InputError(fmt::format("--model {}: read failed", path));
  return fmt::format("{:016x}", hash.value());
}

ScriptedModel::ScriptedModel(const std::string& path) : path_(path) {
  requireModelFile(path);
  try {
    // Onto the CPU whatever device saved it; the trainer moves it to its own.
    module_ = torch::jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    throw InputError(fmt::format("--model {}: not a TorchScript module: {}", path, firstLine(e)));
  }
  if (!module_.find_method("forward")) throw InputError(fmt::format("--model {}: the module has no forward()", path));
  std::map<const void*, std::string> seen;
  mirror(module_, *this, "", seen, path);
}

torch::Tensor ScriptedModel::forward(torch::Tensor x) {
  torch::IValue out = module_.forward({std::move(x)});
  if (!out.isTensor()) {
    throw InputError(fmt::format("--model {}: forward returned {}, but training needs one logits tensor", path_,
                                 out.tagKind()));
  }
  return out.toTensor();
}

void ScriptedModel::train(bool on) {
  torch::nn::Module::train(on);
  module_.train(on);
}

ModelPtr loadScriptedModel(const std::string& path, const InputSpec& input) {
  auto model = std::make_shared<ScriptedModel>(path);
  const std::vector<int64_t> probe_shape{2, input.channels, input.height, input.width};
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    const bool was_training = model->is_training();
    model->eval();  // a probe must not move BatchNorm's running statistics
    try {
      out = model->forward(torch::zeros(probe_shape));
    } catch (const c10::Error& e) {
      throw InputError(fmt::format("--model {}: forward failed on a batch of shape [{}]: {}", path,
                                   fmt::join(probe_shape, ", "), firstLine(e)));
    }
    model->train(was_training);
  }
  if (out.dim() != 2 || out.size(0) != 2 || out.size(1) != input.num_classes) {
    throw InputError(fmt::format("--model {}: a batch of shape [{}] gave output [{}]; the data needs [2, {}] ({} "
                                 "classes)",
                                 path, fmt::join(probe_shape, ", "), fmt::join(out.sizes(), ", "), input.num_classes,
                                 input.num_classes));
  }
  return model;
}

}  // namespace tandem::models
