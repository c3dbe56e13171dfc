// The Python module tessera._tessera: one bind_* function per area, each in its own file, called in
// this order by module.cpp (errors first, so that every later binding's exceptions translate).
// The Python package python/tessera/ re-exports these names with PyTorch's layout (tessera.nn,
// tessera.optim, tessera.data, tessera.distributed, tessera.train) and adds what is easier to write
// in Python (tensor() from nested lists, indexing, the DataLoader iterator).
#pragma once
#include <pybind11/pybind11.h>

#include <memory>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"

namespace tessera::python {

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_tensor(py::module_& m);
void bind_autograd(py::module_& m);
void bind_nn(py::module_& m);
void bind_optim(py::module_& m);
void bind_data(py::module_& m);
void bind_distributed(py::module_& m);
void bind_ps(py::module_& m);
void bind_mesh(py::module_& m);
void bind_train(py::module_& m);
void bind_serve(py::module_& m);
void bind_observe(py::module_& m);

// A module handed to C++ code that keeps it (a parent, Sequential, DistributedDataParallel): when it
// is a Python subclass, the returned pointer also keeps the Python object alive, so its forward()
// override is still there when C++ calls it after the caller dropped its last Python reference.
std::shared_ptr<nn::Module> keep_python_alive(const py::handle& module);

// A state dict as Python sees it (an OrderedDict of name -> tensor, in registration order), and back
// from any mapping (dict order kept): modules, optimizers and ZeRO's full state all use these.
py::object to_ordered_dict(const nn::StateDict& state);
nn::StateDict state_dict_from(const py::handle& mapping);

// The group init_process_group() made (tessera.distributed's default group), or null before it.
dist::ProcessGroupPtr default_group_or_null();
// `group`, or the default group where it is None; an error naming `op` when there is neither.
dist::ProcessGroupPtr group_or_default_group(const py::object& group, const char* op);

}  // namespace tessera::python
