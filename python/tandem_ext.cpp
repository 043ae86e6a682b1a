// tandem._C: the public C++ API (include/tandem/tandem.hpp) for Python. The
// Horovod-style surface is written in Python (tandem/torch/__init__.py) over
// these calls. Every wait releases the GIL; C++ errors arrive as Python
// exceptions carrying the C++ message (ValueError for bad input).
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/ps_optimizer.hpp"
#include "core/environment.hpp"
#include "core/error.hpp"
#include "cluster/host_aggregation.hpp"
#include "core/training_mode.hpp"
#include "core/wire_dtype.hpp"
#include "train/option_keywords.hpp"
#include "tandem/tandem.hpp"

namespace py = pybind11;

namespace {

// Keyword arguments as the declaration's values (train/option_keywords.hpp):
// None, booleans, numbers, names, and lists of numbers.
nlohmann::json keywordValue(const py::handle& value) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    nlohmann::json items = nlohmann::json::array();
    for (const auto& item : value) items.push_back(keywordValue(item));
    return items;
  }
  throw tandem::InputError(fmt::format("expected None, a bool, a number, a string or a list, got {}",
                                       py::str(py::type::of(value)).cast<std::string>()));
}

nlohmann::json keywordValues(const py::dict& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, value] : values) {
    const auto name = key.cast<std::string>();
    try {
      j[name] = keywordValue(value);
    } catch (const tandem::InputError& e) {
      throw tandem::InputError(fmt::format("{}: {}", name, e.what()));
    }
  }
  return j;
}

// Converts a declaration value for Python.
py::object pythonValue(const nlohmann::json& value) {
  if (value.is_null()) return py::none();
  if (value.is_boolean()) return py::bool_(value.get<bool>());
  if (value.is_number_integer()) return py::int_(value.get<int64_t>());
  if (value.is_number()) return py::float_(value.get<double>());
  if (value.is_string()) return py::str(value.get<std::string>());
  py::list items;
  if (value.is_array()) {
    for (const auto& item : value) items.append(pythonValue(item));
    return items;
  }
  return py::str(value.dump());
}

// A torch::nn::Module holding the Python model's parameters (the same
// tensors), so the C++ gradient buckets can hook them. Dotted names become
// underscores: only their order and shapes matter to the buckets.
class ParameterHolder : public torch::nn::Module {
 public:
  explicit ParameterHolder(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
    for (size_t i = 0; i < named.size(); ++i) {
      std::string name = named[i].first;
      for (auto& c : name) c = c == '.' ? '_' : c;
      register_parameter(std::to_string(i) + "_" + name, named[i].second, named[i].second.requires_grad());
    }
  }
};

// A keyword's wire dtype by name; "": init()'s.
std::optional<tandem::WireDtype> wireDtypeOrInit(const std::string& name) {
  if (name.empty()) return std::nullopt;
  return tandem::parseWireDtype(name, "wire_dtype");
}

// GradientAverager over a Python model's named parameters.
class PyGradientAverager {
 public:
  PyGradientAverager(const std::vector<std::pair<std::string, torch::Tensor>>& named, int passes, bool sum,
                     double predivide, const std::string& wire_dtype, double bucket_mb, int process_set)
      : holder_(std::make_shared<ParameterHolder>(named)),
        averager_(*holder_, tandem::AveragerOptions{passes, sum ? tandem::ReduceOp::Sum : tandem::ReduceOp::Average,
                                                    predivide, wireDtypeOrInit(wire_dtype), bucket_mb,
                                                    process_set}) {}
  void synchronize() {
    py::gil_scoped_release release;
    averager_.synchronize();
  }
  void zeroGrad() { averager_.zero_grad(); }
  bool pending() const { return averager_.pending(); }

 private:
  std::shared_ptr<ParameterHolder> holder_;
  tandem::GradientAverager averager_;
};

// The parameter servers behind a Python model: the servers run the
// optimizer described by `settings` (read from the torch.optim optimizer in
// Python), and step() installs the pulled parameters in the model's tensors.
class PyPsOptimizer {
 public:
  PyPsOptimizer(const std::vector<std::pair<std::string, torch::Tensor>>& named, const std::string& mode,
                int staleness, int passes, const py::dict& settings, const py::dict& options)
      : holder_(std::make_shared<ParameterHolder>(named)) {
    tandem::api::PsOptimizerOptions o;
    o.keywords = keywordValues(options);
    o.mode = tandem::parseServerMode(mode, "DistributedOptimizer: mode");
    o.staleness = staleness;
    o.backward_passes_per_step = passes;
    auto& k = o.optimizer;
    k.name = settings["name"].cast<std::string>();
    k.momentum = settings["momentum"].cast<double>();
    k.nesterov = settings["nesterov"].cast<bool>();
    k.weight_decay = settings["weight_decay"].cast<double>();
    k.beta1 = settings["beta1"].cast<double>();
    k.beta2 = settings["beta2"].cast<double>();
    k.eps = settings["eps"].cast<double>();
    k.alpha = settings["alpha"].cast<double>();
    k.centered = settings["centered"].cast<bool>();
    o.lr = settings["lr"].cast<double>();
    py::gil_scoped_release release;
    servers_ = std::make_unique<tandem::api::PsOptimizer>(*holder_, o);
  }
  void setLearningRate(double lr) { servers_->setLearningRate(lr); }
  void step() {
    py::gil_scoped_release release;
    servers_->step();
  }
  void zeroGrad() { servers_->zeroGrad(); }
  void finish() {
    py::gil_scoped_release release;
    servers_->finish();
  }

 private:
  std::shared_ptr<ParameterHolder> holder_;
  std::unique_ptr<tandem::api::PsOptimizer> servers_;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Tandem's C++ runtime for Python (use tandem.torch)";
  // pybind11 tries translators newest first: the base class goes first.
  py::register_exception<tandem::Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception<tandem::InputError>(m, "InputError", PyExc_ValueError);
  // Horovod's type for a collective that failed, a RuntimeError: a dead or
  // silent peer, or ranks that called it differently (also a ValueError,
  // which is what Tandem raised for those before).
  const py::object horovod_internal = py::reinterpret_steal<py::object>(
      PyErr_NewException("tandem._C.HorovodInternalError", PyExc_RuntimeError, nullptr));
  m.attr("HorovodInternalError") = horovod_internal;
  py::register_exception<tandem::PeerError>(m, "PeerError", horovod_internal);
  py::register_exception<tandem::MismatchError>(m, "MismatchError",
                                                py::make_tuple(horovod_internal, py::handle(PyExc_ValueError)));

  // The one declaration of the training options, for tandem.torch's
  // keywords, their defaults and their docstrings.
  m.def("options", [] {
    py::list out;
    for (const auto& o : tandem::train::trainOptions()) {
      py::dict d;
      d["keyword"] = std::string(o.keyword());
      d["flag"] = std::string(o.name());
      d["default"] = pythonValue(tandem::train::keywordDefault(o));
      d["help"] = o.help;
      d["choices"] = o.choices;
      out.append(d);
    }
    return out;
  });
  // Checks values given by keyword as `tandem train` checks its flags, for
  // a run of `mode` (ValueError naming `who` and the keyword).
  m.def(
      "check_options",
      [](const std::string& who, const py::dict& values, const std::string& mode) {
        tandem::train::TrainConfig config;
        const tandem::Mode m = tandem::parseMode(mode, who + ": mode");
        if (m == tandem::Mode::PsAsync) config.distributed.ps_mode = m;
        if (m == tandem::Mode::Ssp) config.distributed.staleness = 1;
        tandem::train::applyKeywordValues(config, keywordValues(values), who);
      },
      py::arg("who"), py::arg("values"), py::arg("mode"));
  m.def("mode_names", [] {
    std::vector<std::string> names;
    for (auto mode : {tandem::Mode::AllReduce, tandem::Mode::PsSync, tandem::Mode::PsAsync, tandem::Mode::Ssp}) {
      names.emplace_back(tandem::modeName(mode));
    }
    return names;
  });
  const tandem::InitOptions init_defaults;
  m.def(
      "init",
      [](double rendezvous_timeout_s, double peer_timeout_s, double bucket_mb, std::string wire_dtype,
         bool error_feedback, std::string hierarchical, std::string secret_file, bool insecure) {
        const tandem::InitOptions options{
            rendezvous_timeout_s,
            peer_timeout_s,
            bucket_mb,
            tandem::parseWireDtype(wire_dtype, "tandem.torch.init: wire_dtype"),
            error_feedback,
            tandem::parseEnum(tandem::cluster::kHostAggregationNames, hierarchical, "tandem.torch.init: hierarchical"),
            std::move(secret_file),
            insecure};
        py::gil_scoped_release release;
        tandem::init(options);
      },
      py::arg("rendezvous_timeout_s") = init_defaults.rendezvous_timeout_s,
      py::arg("peer_timeout_s") = init_defaults.peer_timeout_s, py::arg("bucket_mb") = init_defaults.bucket_mb,
      py::arg("wire_dtype") = tandem::wireDtypeName(init_defaults.wire_dtype),
      py::arg("error_feedback") = init_defaults.error_feedback,
      py::arg("hierarchical") = std::string(tandem::enumName(tandem::cluster::kHostAggregationNames, init_defaults.hierarchical)), py::arg("secret_file") = init_defaults.secret_file,
      py::arg("insecure") = init_defaults.insecure);
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    tandem::shutdown();
  });
  m.def("is_initialized", &tandem::is_initialized);
  // tandem.ray: torchrun's variables for this process's next init (None unsets one).
  m.def("export_variables", [](const std::map<std::string, std::optional<std::string>>& variables) {
    tandem::exportVariables({variables.begin(), variables.end()});
  });
  m.def("elastic_enabled", &tandem::elastic_enabled);
  m.def("elastic_sync_root", &tandem::elastic_sync_root);
  m.def("elastic_hosts_updated", [] {
    py::gil_scoped_release release;
    return tandem::elastic_hosts_updated();
  });
  m.def("elastic_reset", [] {
    py::gil_scoped_release release;
    tandem::elastic_reset();
  });
  m.def("rank", &tandem::rank);
  m.def("size", &tandem::size);
  m.def("local_rank", &tandem::local_rank);
  m.def("local_size", &tandem::local_size);
  m.def("cross_rank", &tandem::cross_rank);
  m.def("cross_size", &tandem::cross_size);
  py::class_<tandem::Work>(m, "Work")
      .def("poll", &tandem::Work::poll)
      .def("wait", [](tandem::Work& work) {
        py::gil_scoped_release release;
        return work.wait();
      });
  // op: 0 Sum, 1 Average, 2 Min, 3 Max, 4 Product, 5 Adasum (tandem::ReduceOp).
  m.def(
      "allreduce_async_",
      [](std::vector<torch::Tensor> tensors, int op, double prescale, double postscale, std::string name,
         int process_set) {
        py::gil_scoped_release release;
        return tandem::allreduce_async(
            std::move(tensors), {static_cast<tandem::ReduceOp>(op), prescale, postscale, std::move(name), process_set});
      },
      py::arg("tensors"), py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("name"),
      py::arg("process_set") = 0);
  m.def(
      "allgather_async",
      [](torch::Tensor tensor, std::string name, int process_set) {
        py::gil_scoped_release release;
        return tandem::allgather_async(std::move(tensor), name, process_set);
      },
      py::arg("tensor"), py::arg("name"), py::arg("process_set") = 0);
  m.def(
      "broadcast_async_",
      [](std::vector<torch::Tensor> tensors, int root_rank, std::string name, int process_set) {
        py::gil_scoped_release release;
        return tandem::broadcast_async(std::move(tensors), root_rank, name, process_set);
      },
      py::arg("tensors"), py::arg("root_rank"), py::arg("name"), py::arg("process_set") = 0);
  m.def(
      "alltoall_async",
      [](torch::Tensor tensor, std::vector<int64_t> splits, std::string name, int process_set) {
        py::gil_scoped_release release;
        return tandem::alltoall_async(std::move(tensor), std::move(splits), name, process_set);
      },
      py::arg("tensor"), py::arg("splits"), py::arg("name"), py::arg("process_set") = 0);
  m.def(
      "barrier",
      [](int process_set) {
        py::gil_scoped_release release;
        tandem::barrier(process_set);
      },
      py::arg("process_set") = 0);
  m.def(
      "add_process_set",
      [](std::vector<int> ranks) {
        py::gil_scoped_release release;
        return tandem::add_process_set(std::move(ranks));
      },
      py::arg("ranks"));
  m.def(
      "remove_process_set",
      [](int id) {
        py::gil_scoped_release release;
        return tandem::remove_process_set(id);
      },
      py::arg("id"));
  m.def("process_sets", &tandem::process_sets);
  m.def("start_timeline", &tandem::start_timeline, py::arg("file_path"), py::arg("mark_cycles"));
  m.def("stop_timeline", &tandem::stop_timeline);
  m.def("join", [] {
    py::gil_scoped_release release;
    return tandem::join();
  });
  m.def(
      "broadcast_",
      [](const std::vector<torch::Tensor>& tensors, int root_rank) {
        py::gil_scoped_release release;
        tandem::broadcast_parameters(tensors, root_rank);
      },
      py::arg("tensors"), py::arg("root_rank"));
  py::class_<PyGradientAverager>(m, "GradientAverager")
      .def(py::init<const std::vector<std::pair<std::string, torch::Tensor>>&, int, bool, double, const std::string&,
                    double, int>(),
           py::arg("named_parameters"), py::arg("backward_passes_per_step") = 1, py::arg("sum") = false,
           py::arg("gradient_predivide_factor") = 1.0, py::arg("wire_dtype") = "", py::arg("bucket_mb") = -1.0,
           py::arg("process_set") = 0)
      .def("synchronize", &PyGradientAverager::synchronize)
      .def("zero_grad", &PyGradientAverager::zeroGrad)
      .def("pending", &PyGradientAverager::pending);
  py::class_<PyPsOptimizer>(m, "PsOptimizer")
      .def(py::init<const std::vector<std::pair<std::string, torch::Tensor>>&, const std::string&, int, int,
                    const py::dict&, const py::dict&>(),
           py::arg("named_parameters"), py::arg("mode"), py::arg("staleness"), py::arg("backward_passes_per_step"),
           py::arg("settings"), py::arg("options"))
      .def("set_lr", &PyPsOptimizer::setLearningRate)
      .def("step", &PyPsOptimizer::step)
      .def("zero_grad", &PyPsOptimizer::zeroGrad)
      .def("finish", &PyPsOptimizer::finish);
}
