// tessera.autograd: Functions whose forward and backward are written in Python (torch.autograd.
// Function), recorded on the C++ tape as one node, and the library's finite-difference gradcheck.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/autograd/node.h"

namespace tessera::python {
namespace {

// A Python callable held by a C++ closure that may be copied, run and dropped on a thread without
// the GIL (the autograd engine releases it): the last owner takes the GIL to let it go.
std::shared_ptr<py::function> hold(py::function f) {
  return std::shared_ptr<py::function>(new py::function(std::move(f)), [](py::function* p) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete p;
  });
}

}  // namespace

void bind_autograd(py::module_& m) {
  // result: the forward's output (no history); inputs: the tensor arguments, in order; backward(grad)
  // returns one gradient (or None) per tensor argument. The Python side (tessera/autograd.py) maps
  // PyTorch's "one per forward argument" convention onto this.
  m.def("_record_function", [](const Tensor& result, const std::string& name, const std::vector<Tensor>& inputs,
                               py::function backward) {
    auto callable = hold(std::move(backward));
    const size_t count = inputs.size();
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.shape());
    std::string label = name;
    autograd::BackwardFn fn = [callable, count, label, shapes](const Tensor& grad) {
      py::gil_scoped_acquire gil;
      py::object out = (*callable)(grad);
      std::vector<Tensor> grads;
      py::list items = py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out) ? py::list(out) : py::list();
      if (items.empty() && !(py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out))) items.append(out);
      TESSERA_CHECK(items.size() == count, "[", label, ".backward] returned ", items.size(),
                    " gradient(s) for ", count, " tensor input(s)");
      for (size_t i = 0; i < count; ++i) {
        if (items[i].is_none()) {
          grads.emplace_back();
          continue;
        }
        Tensor g = items[i].cast<Tensor>();
        TESSERA_CHECK(g.shape() == shapes[i], "[", label, ".backward] the gradient of input ", i, " has shape ",
                      shape_str(g.shape()), ", not the input's ", shape_str(shapes[i]));
        grads.push_back(g);
      }
      return grads;
    };
    // The name outlives the node: the tape keeps it as a std::string.
    return autograd::record(result, label.c_str(), inputs, std::move(fn), autograd::Saves::Nothing);
  });

  m.def("gradcheck", [](py::function f, std::vector<Tensor> inputs, double eps, double atol, double rtol) {
          autograd::GradcheckOptions options;
          options.eps = eps;
          options.atol = atol;
          options.rtol = rtol;
          auto callable = hold(std::move(f));
          auto result = autograd::gradcheck(
              [callable](const std::vector<Tensor>& xs) {
                py::gil_scoped_acquire gil;
                py::tuple args(xs.size());
                for (size_t i = 0; i < xs.size(); ++i) args[i] = py::cast(xs[i]);
                return (*callable)(*args).cast<Tensor>();
              },
              std::move(inputs), options);
          return py::make_tuple(result.ok, result.message, result.max_abs_error);
        }, py::arg("fn"), py::arg("inputs"), py::arg("eps") = 1e-2, py::arg("atol") = 2e-3, py::arg("rtol") = 2e-2);
}

}  // namespace tessera::python
