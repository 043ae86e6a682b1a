#include "train/model_export.hpp"

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <sstream>

#include "core/error.hpp"
#include "models/scripted_model.hpp"
#include "obs/metrics_writer.hpp"

namespace tandem::train {
namespace fs = std::filesystem;

void exportStateDict(const models::Model& model, const fs::path& path) {
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& p : model.named_parameters()) state.insert(p.key(), p.value().detach().contiguous());
  for (const auto& b : model.named_buffers()) state.insert(b.key(), b.value().detach().contiguous());
  // torch::pickle_save, but without TorchScript's type tags on the dict:
  // torch.load in PyTorch 2.6+ defaults to weights_only=True, which refuses
  // the tag's global (torch.jit._pickle.restore_type_tag). A plain
  // dict of tensors is what torch.save writes and weights_only accepts.
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickled.insert(pickled.end(), data, data + size); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(state);
  pickler.stop();
  std::vector<char> bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    const char* begin = static_cast<const char*>(data);
    bytes.insert(bytes.end(), begin, begin + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  obs::writeFileAtomically(path, std::string_view(bytes.data(), bytes.size()));
}

void exportTorchScript(models::Model& model, const fs::path& path) {
  auto* scripted = dynamic_cast<models::ScriptedModel*>(&model);
  if (scripted == nullptr) {
    throw InputError("--format torchscript: the checkpoint holds a built-in model, not a TorchScript one (export its "
                     "state dict with --format state_dict)");
  }
  std::ostringstream bytes;
  try {
    scripted->module().save(bytes);
  } catch (const c10::Error& e) {
    throw Error(fmt::format("{}: cannot write the TorchScript module: {}", path.string(), e.what_without_backtrace()));
  }
  obs::writeFileAtomically(path, bytes.str());
}

}  // namespace tandem::train
