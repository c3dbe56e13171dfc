// tessera.Tensor: the C++ Tensor (a handle; copies alias) with PyTorch's Python surface: dtype and
// shape, arithmetic operators, views, reductions, autograd (backward, .grad, requires_grad), and
// NumPy without copies both ways (numpy(), from_numpy(), __array__, the buffer protocol).
// Ops release the GIL: other Python threads run while a matmul or a backward pass does.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "tessera/autograd/autocast.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/backend/cuda/device_info.h"
#include "tessera/core/rng.h"
#include "tessera/ops/ops.h"
#include "tessera/util/thread_pool.h"

namespace tessera::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// reshape(2, 3), reshape((2, 3)) and reshape([2, 3]) all mean the same, as in PyTorch.
Shape shape_from_args(const py::args& args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return args[0].cast<Shape>();
  return args.cast<Shape>();
}

Shape dims_from(const py::object& dim) {
  if (py::isinstance<py::int_>(dim)) return {dim.cast<int64_t>()};
  return dim.cast<Shape>();
}

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return py::dtype::of<float>();
    case DType::Int64: return py::dtype::of<int64_t>();
    case DType::Float16: return py::dtype("float16");
    case DType::BFloat16: break;
  }
  throw ValueError("[Tensor.numpy] NumPy has no bfloat16; convert first: t.to(tessera.float32).numpy()");
}

// A NumPy array over the tensor's memory; the array's base keeps the tensor (and so its storage) alive.
py::array to_numpy(const Tensor& t, bool check_grad) {
  TESSERA_CHECK(!check_grad || !t.requires_grad(),
                "[Tensor.numpy] can't call numpy() on a tensor that requires grad; use t.detach().numpy()");
  TESSERA_CHECK(t.impl()->storage->resident(),
                "[Tensor.numpy] the tensor's memory is released (a ZeRO shard elsewhere); gather it first");
  py::dtype dtype = numpy_dtype(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s * dtype_size(t.dtype())));
  auto* keep = new Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dtype, shape, strides, t.raw_data(), base);
}

// A tensor over the array's memory (no copy); the storage keeps a reference to the array.
Tensor from_numpy(const py::array& array) {
  DType dtype;
  if (array.dtype().is(py::dtype::of<float>())) {
    dtype = DType::Float32;
  } else if (array.dtype().is(py::dtype::of<int64_t>())) {
    dtype = DType::Int64;
  } else {
    throw ValueError("[from_numpy] arrays of " + std::string(py::str(array.dtype())) +
                     " have no tessera dtype (float32 and int64 do): convert first, e.g. "
                     "a.astype(numpy.float32) or a.astype(numpy.int64)");
  }
  const auto item = static_cast<py::ssize_t>(dtype_size(dtype));
  Shape shape, strides;
  int64_t extent = array.size() == 0 ? 0 : 1;  // elements from the first to one past the last
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    py::ssize_t stride = array.strides(d);
    TESSERA_CHECK(stride >= 0 && stride % item == 0, "[from_numpy] dimension ", d, " has a stride of ", stride,
                  " bytes, which is not a non-negative multiple of the element size ", item,
                  "; pass numpy.ascontiguousarray(a)");
    shape.push_back(array.shape(d));
    strides.push_back(stride / item);
    if (array.size() > 0) extent += (array.shape(d) - 1) * (stride / item);
  }
  TESSERA_CHECK(array.writeable(), "[from_numpy] the array is read-only; tensors are writable: pass a.copy()");
  auto* owner = new py::object(py::reinterpret_borrow<py::object>(array));
  auto storage = Storage::wrap(const_cast<void*>(array.data()), static_cast<size_t>(extent) * item, cpu_device(),
                               [owner] {
                                 if (!Py_IsInitialized()) return;  // the interpreter is gone: so is the array
                                 py::gil_scoped_acquire gil;
                                 delete owner;
                               });
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor reduce_sum(const Tensor& t, const py::object& dim, bool keepdim) {
  if (dim.is_none()) return sum(t);
  Shape dims = dims_from(dim);
  py::gil_scoped_release release;
  return sum(t, dims, keepdim);
}

Tensor reduce_mean(const Tensor& t, const py::object& dim, bool keepdim) {
  if (dim.is_none()) return mean(t);
  Shape dims = dims_from(dim);
  py::gil_scoped_release release;
  return mean(t, dims, keepdim);
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::enum_<DType>(m, "dtype")
      .value("float32", DType::Float32)
      .value("int64", DType::Int64)
      .value("bfloat16", DType::BFloat16)
      .value("float16", DType::Float16)
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); });
  m.attr("float32") = DType::Float32;
  m.attr("float") = DType::Float32;
  m.attr("int64") = DType::Int64;
  m.attr("long") = DType::Int64;
  m.attr("bfloat16") = DType::BFloat16;
  m.attr("float16") = DType::Float16;

  // tessera.device("cuda:0"), as torch.device: where a tensor lives.
  py::class_<Device>(m, "device")
      .def(py::init([](const std::string& text) { return parse_device(text); }), py::arg("spec"))
      .def_property_readonly("type", [](const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; })
      .def_property_readonly("index", [](const Device& d) { return d.index; })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__eq__", [](const Device& a, const std::string& b) { return a.str() == b || (b == "cuda" && a == cuda_device(0)); })
      .def("__hash__", [](const Device& d) { return std::hash<std::string>()(d.str()); })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) { return "device('" + d.str() + "')"; });
  py::implicitly_convertible<std::string, Device>();
  // tessera.cuda.is_available() / device_count() (python/tessera/cuda.py) read these.
  m.def("_cuda_device_count", [] { return cuda::device_count(); });
  m.def("_cuda_unavailable_reason", [] { return cuda::unavailable_reason(); });
  m.def("_set_allow_tf32", &set_allow_tf32, py::arg("allow"));
  m.def("_allow_tf32", &allow_tf32);

  py::class_<Tensor> tensor(m, "Tensor", py::buffer_protocol(), "A view of shared storage with autograd state");
  tensor
      .def_buffer([](const Tensor& t) -> py::buffer_info {
        TESSERA_CHECK(t.dtype() != DType::BFloat16, "[Tensor] the buffer protocol has no bfloat16; use t.to(tessera.float32)");
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
        for (int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s * dtype_size(t.dtype())));
        if (t.dtype() == DType::Float32)
          return py::buffer_info(t.raw_data(), sizeof(float), py::format_descriptor<float>::format(), t.dim(), shape, strides);
        return py::buffer_info(t.raw_data(), sizeof(int64_t), py::format_descriptor<int64_t>::format(), t.dim(), shape, strides);
      })
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("device", &Tensor::device)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("size", [](const Tensor& t, const py::object& d) -> py::object {
             if (d.is_none()) return py::tuple(py::cast(t.shape()));
             return py::int_(t.size(d.cast<int64_t>()));
           }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); })
      .def("__len__", [](const Tensor& t) {
        TESSERA_CHECK(t.dim() > 0, "[Tensor] len() of a 0-d tensor");
        return t.size(0);
      })
      .def("item", [](const Tensor& t) -> py::object {
        TESSERA_CHECK(t.numel() == 1, "[Tensor.item] the tensor has ", t.numel(), " elements, not 1");
        if (t.dtype() == DType::Int64) return py::int_(t.contiguous().item<int64_t>());
        return py::float_(t.to(DType::Float32).contiguous().item<float>());
      })
      .def("numpy", [](const Tensor& t) { return to_numpy(t, true); })
      .def("__array__", [](const Tensor& t, py::object dtype) {
             py::array a = to_numpy(t.requires_grad() ? t.detach() : t, false);
             return dtype.is_none() ? a : a.attr("astype")(dtype).cast<py::array>();
           }, py::arg("dtype") = py::none())
      .def("tolist", [](const Tensor& t) { return to_numpy(t.detach().to(t.dtype() == DType::BFloat16 ? DType::Float32 : t.dtype()), false).attr("tolist")(); })
      .def("__repr__", &Tensor::str)
      // Autograd.
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& t, bool on) { t.set_requires_grad(on); })
      .def("requires_grad_", [](Tensor& t, bool on) { return t.set_requires_grad(on); }, py::arg("requires_grad") = true)
      .def_property("grad",
                    [](const Tensor& t) -> py::object {
                      Tensor g = t.grad();
                      return g.defined() ? py::cast(g) : py::none();
                    },
                    [](const Tensor& t, const py::object& g) { t.set_grad(g.is_none() ? Tensor() : g.cast<Tensor>()); })
      .def("backward", [](const Tensor& t, const py::object& gradient, bool retain_graph) {
             Tensor g = gradient.is_none() ? Tensor() : gradient.cast<Tensor>();
             py::gil_scoped_release release;
             t.backward(g, retain_graph);
           }, py::arg("gradient") = py::none(), py::arg("retain_graph") = false)
      .def("detach", &Tensor::detach)
      // Views and copies.
      .def("reshape", [](const Tensor& t, py::args shape) { return t.reshape(shape_from_args(shape)); })
      .def("view", [](const Tensor& t, py::args shape) { return t.view(shape_from_args(shape)); })
      .def("permute", [](const Tensor& t, py::args dims) { return t.permute(shape_from_args(dims)); })
      .def("expand", [](const Tensor& t, py::args shape) { return t.expand(shape_from_args(shape)); })
      .def("transpose", &Tensor::transpose, Release())
      .def_property_readonly("T", [](const Tensor& t) {
        TESSERA_CHECK(t.dim() == 2, "[Tensor.T] needs a 2-d tensor, got ", t.dim(), " dimensions");
        return t.transpose(0, 1);
      })
      .def("slice", &Tensor::slice, py::arg("dim"), py::arg("start"), py::arg("end"), py::arg("step") = 1)
      .def("unsqueeze", &Tensor::unsqueeze)
      .def("squeeze", &Tensor::squeeze)
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("contiguous", &Tensor::contiguous, Release())
      .def("clone", &Tensor::clone, Release())
      .def("to", py::overload_cast<DType>(&Tensor::to, py::const_), Release())
      // t.to("cuda:0"), t.to(tessera.device("cuda")): a copy on that device (differentiable).
      .def("to", py::overload_cast<Device>(&Tensor::to, py::const_), Release())
      .def("cuda", &Tensor::cuda, py::arg("index") = 0, Release())
      .def("cpu", &Tensor::cpu, Release())
      .def("float", [](const Tensor& t) { return t.to(DType::Float32); }, Release())
      .def("long", [](const Tensor& t) { return t.to(DType::Int64); }, Release())
      // In place, no autograd (as under torch.no_grad()).
      .def("fill_", [](Tensor& t, float v) { fill_(t, v); return t; }, Release())
      .def("zero_", [](Tensor& t) { fill_(t, 0.0f); return t; }, Release())
      .def("copy_", [](Tensor& t, const Tensor& src) { copy_(t, src); return t; }, Release())
      .def("add_", [](Tensor& t, const Tensor& src, float alpha) { add_(t, src, alpha); return t; },
           py::arg("other"), py::kw_only(), py::arg("alpha") = 1.0f, Release())
      .def("mul_", [](Tensor& t, float v) { mul_(t, v); return t; }, Release())
      // Arithmetic (broadcasting), as operators and methods.
      .def("__add__", [](const Tensor& a, const Tensor& b) { return add(a, b); }, Release())
      .def("__add__", [](const Tensor& a, float b) { return add(a, b); }, Release())
      .def("__radd__", [](const Tensor& a, float b) { return add(a, b); }, Release())
      .def("__sub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, Release())
      .def("__sub__", [](const Tensor& a, float b) { return add(a, -b); }, Release())
      .def("__rsub__", [](const Tensor& a, float b) { return add(neg(a), b); }, Release())
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, Release())
      .def("__mul__", [](const Tensor& a, float b) { return mul(a, b); }, Release())
      .def("__rmul__", [](const Tensor& a, float b) { return mul(a, b); }, Release())
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return div(a, b); }, Release())
      .def("__truediv__", [](const Tensor& a, float b) { return mul(a, 1.0f / b); }, Release())
      .def("__rtruediv__", [](const Tensor& a, float b) { return mul(pow(a, -1.0f), b); }, Release())
      .def("__pow__", [](const Tensor& a, float e) { return pow(a, e); }, Release())
      .def("__pow__", [](const Tensor& a, const Tensor& e) { return pow(a, e); }, Release())
      .def("__neg__", [](const Tensor& a) { return neg(a); }, Release())
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, Release())
      .def("add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, Release())
      .def("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, Release())
      .def("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, Release())
      .def("div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, Release())
      .def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, Release())
      .def("pow", [](const Tensor& a, float e) { return pow(a, e); }, Release())
      .def("exp", [](const Tensor& a) { return exp(a); }, Release())
      .def("log", [](const Tensor& a) { return log(a); }, Release())
      .def("sqrt", [](const Tensor& a) { return sqrt(a); }, Release())
      .def("tanh", [](const Tensor& a) { return tanh(a); }, Release())
      .def("sigmoid", [](const Tensor& a) { return sigmoid(a); }, Release())
      .def("relu", [](const Tensor& a) { return relu(a); }, Release())
      .def("softmax", [](const Tensor& a, int64_t dim) { return softmax(a, dim); }, py::arg("dim"), Release())
      .def("log_softmax", [](const Tensor& a, int64_t dim) { return log_softmax(a, dim); }, py::arg("dim"), Release())
      .def("gt", [](const Tensor& a, float v) { return gt(a, v); }, Release())
      .def("eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, Release())
      // Reductions.
      .def("sum", &reduce_sum, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("mean", &reduce_mean, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("max", [](const Tensor& t, const py::object& dim, bool keepdim) -> py::object {
             if (dim.is_none()) return py::cast(max(t));
             MaxResult r = max(t, dim.cast<int64_t>(), keepdim);
             return py::make_tuple(r.values, r.indices);
           }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("argmax", [](const Tensor& t, int64_t dim, bool keepdim) { return argmax(t, dim, keepdim); },
           py::arg("dim"), py::arg("keepdim") = false, Release());

  // Factories and free functions.
  m.def("from_numpy", &from_numpy, py::arg("array"), "A tensor sharing the array's memory (float32 or int64)");
  m.def("empty", [](py::args shape, DType dtype) { return Tensor::empty(shape_from_args(shape), dtype); },
        py::kw_only(), py::arg("dtype") = DType::Float32);
  m.def("zeros", [](py::args shape, DType dtype, bool rg) { return zeros(shape_from_args(shape), dtype).set_requires_grad(rg); },
        py::kw_only(), py::arg("dtype") = DType::Float32, py::arg("requires_grad") = false);
  m.def("ones", [](py::args shape, DType dtype, bool rg) { return ones(shape_from_args(shape), dtype).set_requires_grad(rg); },
        py::kw_only(), py::arg("dtype") = DType::Float32, py::arg("requires_grad") = false);
  m.def("full", [](const Shape& shape, float value, DType dtype, bool rg) { return full(shape, value, dtype).set_requires_grad(rg); },
        py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = DType::Float32,
        py::arg("requires_grad") = false);
  m.def("zeros_like", &zeros_like);
  m.def("ones_like", &ones_like);
  m.def("arange", [](int64_t end, DType dtype) { return arange(end, dtype); }, py::arg("end"),
        py::kw_only(), py::arg("dtype") = DType::Int64);
  m.def("randn", [](py::args shape, bool rg) { return randn(shape_from_args(shape)).set_requires_grad(rg); },
        py::kw_only(), py::arg("requires_grad") = false);
  m.def("rand", [](py::args shape, bool rg) { return rand(shape_from_args(shape)).set_requires_grad(rg); },
        py::kw_only(), py::arg("requires_grad") = false);
  m.def("randint", [](int64_t low, int64_t high, const Shape& size) { return randint(low, high, size); },
        py::arg("low"), py::arg("high"), py::arg("size"));
  m.def("manual_seed", &manual_seed, py::arg("seed"));
  m.def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, Release());
  m.def("cat", &cat, py::arg("tensors"), py::arg("dim") = 0, Release());
  m.def("stack", &stack, py::arg("tensors"), py::arg("dim") = 0, Release());
  m.def("split", &split, py::arg("tensor"), py::arg("split_size"), py::arg("dim") = 0, Release());
  m.def("where", &where, Release());
  m.def("index_select", &index_select, Release());
  // `with tessera.autocast(tessera.bfloat16):` — matrix products in bf16, fp32 accumulation.
  struct AutocastScope {
    DType dtype;
    std::unique_ptr<Autocast> scope;
  };
  py::class_<AutocastScope>(m, "autocast", "Mixed precision for the block: matrix products (matmul, linear, conv2d, attention) in bfloat16 or "
                                    "float16, fp32 accumulation")
      .def(py::init([](DType dtype) {
             TESSERA_CHECK(dtype == DType::BFloat16 || dtype == DType::Float16 || dtype == DType::Float32,
                           "[autocast] dtype must be tessera.bfloat16, tessera.float16 or tessera.float32");
             return AutocastScope{dtype, nullptr};
           }),
           py::arg("dtype") = DType::BFloat16)
      .def("__enter__", [](AutocastScope& a) { a.scope = std::make_unique<Autocast>(a.dtype); })
      .def("__exit__", [](AutocastScope& a, py::args) { a.scope.reset(); });
  m.def("set_num_threads", &set_num_threads, py::arg("n"), "The one intra-op pool (ops and OpenBLAS)");
  m.def("get_num_threads", &num_threads);
  m.def("is_grad_enabled", &autograd::grad_enabled);
  m.def("set_grad_enabled", &autograd::set_grad_enabled);
}

}  // namespace tessera::python
