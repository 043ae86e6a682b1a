// tandem._C: the public C++ API (include/tandem/tandem.hpp) for Python. The
// Horovod-style surface is written in Python (tandem/torch/__init__.py) over
// these calls. Every wait releases the GIL; C++ errors arrive as Python
// exceptions carrying the C++ message (ValueError for bad input).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tandem/tandem.hpp"

namespace py = pybind11;

namespace {

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

// GradientAverager over a Python model's named parameters.
class PyGradientAverager {
 public:
  explicit PyGradientAverager(const std::vector<std::pair<std::string, torch::Tensor>>& named)
      : holder_(std::make_shared<ParameterHolder>(named)), averager_(*holder_) {}
  void synchronize() {
    py::gil_scoped_release release;
    averager_.synchronize();
  }
  void zeroGrad() { averager_.zero_grad(); }

 private:
  std::shared_ptr<ParameterHolder> holder_;
  tandem::GradientAverager averager_;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Tandem's C++ runtime for Python (use tandem.torch)";
  py::register_exception<tandem::InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception<tandem::PeerError>(m, "PeerError", PyExc_RuntimeError);
  py::register_exception<tandem::Error>(m, "Error", PyExc_RuntimeError);

  m.def(
      "init",
      [](double rendezvous_timeout_s, double peer_timeout_s, double bucket_mb) {
        py::gil_scoped_release release;
        tandem::init({rendezvous_timeout_s, peer_timeout_s, bucket_mb});
      },
      py::arg("rendezvous_timeout_s") = 60.0, py::arg("peer_timeout_s") = 120.0, py::arg("bucket_mb") = 25.0);
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    tandem::shutdown();
  });
  m.def("is_initialized", &tandem::is_initialized);
  m.def("rank", &tandem::rank);
  m.def("size", &tandem::size);
  m.def("local_rank", &tandem::local_rank);
  m.def("local_size", &tandem::local_size);
  m.def(
      "allreduce_",
      [](torch::Tensor tensor, bool average) {
        py::gil_scoped_release release;
        tandem::allreduce(tensor, average ? tandem::ReduceOp::Average : tandem::ReduceOp::Sum);
      },
      py::arg("tensor"), py::arg("average"));
  m.def(
      "broadcast_",
      [](const std::vector<torch::Tensor>& tensors, int root_rank) {
        py::gil_scoped_release release;
        tandem::broadcast_parameters(tensors, root_rank);
      },
      py::arg("tensors"), py::arg("root_rank"));
  py::class_<PyGradientAverager>(m, "GradientAverager")
      .def(py::init<const std::vector<std::pair<std::string, torch::Tensor>>&>(), py::arg("named_parameters"))
      .def("synchronize", &PyGradientAverager::synchronize)
      .def("zero_grad", &PyGradientAverager::zeroGrad);
}
