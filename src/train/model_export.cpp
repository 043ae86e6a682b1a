#include "train/model_export.hpp"

#include <fmt/format.h>
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
  const std::vector<char> bytes = torch::pickle_save(state);
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
