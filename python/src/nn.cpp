// tessera.nn: Module (subclassable from Python: parameters, buffers and children register by
// attribute assignment, as in PyTorch), Parameter, the standard layers, and tessera.nn.functional.
// A Python subclass is a C++ Module too (the PyModule trampoline), so DistributedDataParallel and
// the checkpoint code see its parameters in registration order and call its forward().
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/milnce.h"
#include "tessera/nn/mixture_of_experts.h"
#include "tessera/nn/models.h"
#include "tessera/nn/transformer.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/context/layout.h"

namespace tessera::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// A Tensor registered by attribute assignment: nn.Parameter(t) aliases t's storage, requires grad.
struct Parameter : Tensor {
  explicit Parameter(const Tensor& t) : Tensor(t) {}
};

class PyModule : public nn::Module {
 public:
  Tensor forward(const Tensor& input) override {
    PYBIND11_OVERRIDE_NAME(Tensor, nn::Module, "forward", forward, input);
  }
  // The Python class's name, for error messages ("[MyNet::forward] ...").
  std::string name() const override {
    py::gil_scoped_acquire gil;
    py::handle self = py::detail::get_object_handle(static_cast<const nn::Module*>(this),
                                                    py::detail::get_type_info(typeid(nn::Module)));
    if (!self) return "Module";
    return py::str(py::type::handle_of(self).attr("__name__"));
  }
  using nn::Module::set_buffer;
  using nn::Module::set_child;
  using nn::Module::set_parameter;
};

// The C++ Module of a Python Module object; an AttributeError (not a crash) when the subclass's
// __init__ has not called super().__init__() yet, so that no C++ object exists to register into.
nn::Module& module_of(const py::object& self) {
  auto* instance = reinterpret_cast<py::detail::instance*>(self.ptr());
  bool constructed = true;
  for (auto holder : py::detail::values_and_holders(instance)) constructed = constructed && holder.holder_constructed();
  if (!constructed)
    throw py::attribute_error("[Module] cannot assign attributes before Module.__init__() is called: "
                              "call super().__init__() first in " +
                              std::string(py::str(py::type::handle_of(self).attr("__name__"))) + ".__init__");
  return *self.cast<nn::Module*>();
}

void set_attribute(const py::object& self, const py::str& name, const py::object& value) {
  if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0) throw py::error_already_set();
}

py::list named_list(const nn::StateDict& state) {
  py::list out;
  for (const auto& [name, tensor] : state) out.append(py::make_tuple(name, tensor));
  return out;
}

Pool2dOptions pool_options(int64_t kernel, const py::object& stride, int64_t padding) {
  int64_t s = stride.is_none() ? kernel : stride.cast<int64_t>();
  return Pool2dOptions{kernel, kernel, s, s, padding, padding};
}

void bind_functional(py::module_& f) {
  f.def("relu", [](const Tensor& x) { return relu(x); }, Release());
  f.def("gelu", [](const Tensor& x) { return gelu(x); }, Release());
  f.def("sigmoid", [](const Tensor& x) { return sigmoid(x); }, Release());
  f.def("tanh", [](const Tensor& x) { return tanh(x); }, Release());
  f.def("softmax", [](const Tensor& x, int64_t dim) { return softmax(x, dim); }, py::arg("input"), py::arg("dim"), Release());
  f.def("log_softmax", [](const Tensor& x, int64_t dim) { return log_softmax(x, dim); }, py::arg("input"), py::arg("dim"), Release());
  f.def("linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) { return linear(x, w, b.value_or(Tensor())); },
        py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), Release());
  f.def("conv2d",
        [](const Tensor& x, const Tensor& w, std::optional<Tensor> b, int64_t stride, int64_t padding, int64_t dilation,
           int64_t groups) {
          return conv2d(x, w, b.value_or(Tensor()), Conv2dOptions{stride, stride, padding, padding, dilation, dilation, groups});
        },
        py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("groups") = 1, Release());
  f.def("max_pool2d", [](const Tensor& x, int64_t k, const py::object& s, int64_t p) {
          auto opt = pool_options(k, s, p);
          py::gil_scoped_release release;
          return max_pool2d(x, opt);
        }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  f.def("avg_pool2d", [](const Tensor& x, int64_t k, const py::object& s, int64_t p) {
          auto opt = pool_options(k, s, p);
          py::gil_scoped_release release;
          return avg_pool2d(x, opt);
        }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  f.def("cross_entropy", [](const Tensor& logits, const Tensor& target, int64_t ignore_index, float smoothing) {
          return cross_entropy(logits, target, CrossEntropyOptions{ignore_index, smoothing});
        }, py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100, py::arg("label_smoothing") = 0.0f, Release());
  f.def("mse_loss", [](const Tensor& a, const Tensor& b) { return mse_loss(a, b); }, py::arg("input"), py::arg("target"), Release());
  f.def("dropout", [](const Tensor& x, float p, bool training) { return dropout(x, p, training); },
        py::arg("input"), py::arg("p") = 0.5f, py::arg("training") = true, Release());
  f.def("layer_norm", [](const Tensor& x, const Shape& shape, std::optional<Tensor> w, std::optional<Tensor> b, float eps) {
          return layer_norm(x, shape, w.value_or(Tensor()), b.value_or(Tensor()), eps);
        }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
        py::arg("eps") = 1e-5f, Release());
  f.def("embedding", [](const Tensor& indices, const Tensor& weight) { return embedding(weight, indices); },
        py::arg("input"), py::arg("weight"), Release());
  f.def("scaled_dot_product_attention", [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
          return scaled_dot_product_attention(q, k, v, causal);
        }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("is_causal") = false, Release());
  f.def("logsumexp", [](const Tensor& x, int64_t dim) { return nn::logsumexp(x, dim); }, py::arg("input"), py::arg("dim"), Release());
  f.def("l2_normalize", [](const Tensor& x) { return nn::l2_normalize(x); }, py::arg("input"), Release());
  f.def("mil_nce_loss", [](const Tensor& video, const Tensor& text, float temperature, const py::object& group) {
          dist::ProcessGroupPtr g = group.is_none() ? nullptr : group.cast<dist::ProcessGroupPtr>();
          py::gil_scoped_release release;
          return nn::mil_nce_loss(video, text, temperature, g.get());
        }, py::arg("video"), py::arg("text"), py::arg("temperature") = 0.1f, py::arg("group") = py::none(),
        "MIL-NCE over video (B, D) and text (B, K, D); with a group, negatives from every rank's batch");
}

}  // namespace

py::object to_ordered_dict(const nn::StateDict& state) {
  py::object dict = py::module_::import("collections").attr("OrderedDict")();
  for (const auto& [name, tensor] : state) dict[py::str(name)] = tensor;
  return dict;
}

nn::StateDict state_dict_from(const py::handle& mapping) {
  nn::StateDict state;
  for (auto item : mapping.attr("items")()) {
    auto pair = item.cast<py::tuple>();
    state.emplace_back(pair[0].cast<std::string>(), pair[1].cast<Tensor>());
  }
  return state;
}

std::shared_ptr<nn::Module> keep_python_alive(const py::handle& module) {
  auto held = module.cast<std::shared_ptr<nn::Module>>();
  if (dynamic_cast<PyModule*>(held.get()) == nullptr) return held;  // a C++ layer: nothing more to keep
  auto* owner = new py::object(py::reinterpret_borrow<py::object>(module));
  return std::shared_ptr<nn::Module>(held.get(), [owner](nn::Module*) {
    if (!Py_IsInitialized()) return;  // interpreter gone: so is the object
    py::gil_scoped_acquire gil;
    delete owner;
  });
}

void bind_nn(py::module_& m) {
  py::class_<Parameter, Tensor>(m, "Parameter", "A tensor that a Module registers as a parameter when assigned")
      .def(py::init([](const Tensor& data, bool requires_grad) {
             Parameter p(data.detach());
             p.set_requires_grad(requires_grad);
             return p;
           }),
           py::arg("data"), py::arg("requires_grad") = true);

  py::class_<nn::Module, PyModule, std::shared_ptr<nn::Module>>(m, "Module", py::dynamic_attr())
      .def(py::init<>())
      .def("forward", &nn::Module::forward, Release())
      .def("__call__", [](py::object self, py::args args, py::kwargs kwargs) { return self.attr("forward")(*args, **kwargs); })
      .def("__setattr__", [](py::object self, py::str name, py::object value) {
        if (auto* module = dynamic_cast<PyModule*>(&module_of(self))) {
          std::string key = name;
          if (py::isinstance<Parameter>(value))
            module->set_parameter(key, value.cast<Tensor>());
          else if (py::isinstance<nn::Module>(value))
            module->set_child(key, keep_python_alive(value));
        }
        set_attribute(self, name, value);
      })
      .def("register_buffer", [](py::object self, py::str name, const Tensor& tensor) {
        auto* module = dynamic_cast<PyModule*>(&module_of(self));
        TESSERA_CHECK(module != nullptr, "[Module.register_buffer] only modules written in Python take new buffers");
        module->set_buffer(name, tensor);
        set_attribute(self, name, py::cast(tensor));
      })
      .def("register_parameter", [](py::object self, py::str name, const Tensor& tensor) {
        self.attr("__setattr__")(name, py::cast(Parameter(tensor)));
      })
      .def("add_module", [](py::object self, py::str name, py::object module) { self.attr("__setattr__")(name, module); })
      .def("parameters", &nn::Module::parameters, py::arg("recurse") = true)
      .def("named_parameters", [](const nn::Module& mod, bool recurse) { return named_list(mod.named_parameters(recurse)); },
           py::arg("recurse") = true)
      .def("buffers", [](const nn::Module& mod, bool recurse) {
             std::vector<Tensor> out;
             for (auto& [n, t] : mod.named_buffers(recurse)) out.push_back(t);
             return out;
           }, py::arg("recurse") = true)
      .def("named_buffers", [](const nn::Module& mod, bool recurse) { return named_list(mod.named_buffers(recurse)); },
           py::arg("recurse") = true)
      .def("children", [](const nn::Module& mod) {
        py::list out;
        for (auto& [n, child] : mod.children()) out.append(py::cast(child));
        return out;
      })
      .def("named_children", [](const nn::Module& mod) {
        py::list out;
        for (auto& [n, child] : mod.children()) out.append(py::make_tuple(n, py::cast(child)));
        return out;
      })
      .def("train", [](py::object self, bool mode) { module_of(self).train(mode); return self; }, py::arg("mode") = true)
      .def("eval", [](py::object self) { module_of(self).eval(); return self; })
      .def_property_readonly("training", &nn::Module::is_training)
      .def("zero_grad", &nn::Module::zero_grad, py::arg("set_to_none") = true)
      // In place, returning the module, as torch.nn.Module.to / .cuda() / .cpu().
      .def("to", [](py::object self, const Device& device) {
             {
               py::gil_scoped_release release;
               module_of(self).to(device);
             }
             return self;
           }, py::arg("device"))
      .def("cuda", [](py::object self, int index) {
             {
               py::gil_scoped_release release;
               module_of(self).to(cuda_device(index));
             }
             return self;
           }, py::arg("index") = 0)
      .def("cpu", [](py::object self) {
             {
               py::gil_scoped_release release;
               module_of(self).to(cpu_device());
             }
             return self;
           })
      .def("num_parameters", &nn::Module::num_parameters)
      .def("state_dict", [](const nn::Module& mod) { return to_ordered_dict(mod.state_dict()); })
      .def("load_state_dict", [](nn::Module& mod, const py::object& state, bool strict) {
             auto converted = state_dict_from(state);
             py::gil_scoped_release release;
             mod.load_state_dict(converted, strict);
           }, py::arg("state_dict"), py::arg("strict") = true)
      .def("__repr__", [](const nn::Module& mod) { return mod.name() + "(" + std::to_string(mod.num_parameters()) + " parameters)"; });

  using Ptr = std::shared_ptr<nn::Module>;
  py::class_<nn::Linear, nn::Module, std::shared_ptr<nn::Linear>>(m, "Linear")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true)
      .def_property_readonly("weight", [](const nn::Linear& l) { return l.weight; })
      .def_property_readonly("bias", [](const nn::Linear& l) -> py::object { return l.bias.defined() ? py::cast(l.bias) : py::none(); });
  py::class_<nn::Conv2d, nn::Module, std::shared_ptr<nn::Conv2d>>(m, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, int64_t dilation, int64_t groups,
                       bool bias) { return std::make_shared<nn::Conv2d>(in, out, k, nn::Conv2dConfig{stride, padding, dilation, groups, bias}); }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true)
      .def_property_readonly("weight", [](const nn::Conv2d& c) { return c.weight; })
      .def_property_readonly("bias", [](const nn::Conv2d& c) -> py::object { return c.bias.defined() ? py::cast(c.bias) : py::none(); });
  py::class_<nn::MaxPool2d, nn::Module, std::shared_ptr<nn::MaxPool2d>>(m, "MaxPool2d")
      .def(py::init([](int64_t k, const py::object& s, int64_t p) { return std::make_shared<nn::MaxPool2d>(k, s.is_none() ? -1 : s.cast<int64_t>(), p); }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  py::class_<nn::AvgPool2d, nn::Module, std::shared_ptr<nn::AvgPool2d>>(m, "AvgPool2d")
      .def(py::init([](int64_t k, const py::object& s, int64_t p) { return std::make_shared<nn::AvgPool2d>(k, s.is_none() ? -1 : s.cast<int64_t>(), p); }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  py::class_<nn::BatchNorm, nn::Module, std::shared_ptr<nn::BatchNorm>>(m, "_BatchNorm")
      .def_property_readonly("weight", [](const nn::BatchNorm& b) { return b.weight; })
      .def_property_readonly("bias", [](const nn::BatchNorm& b) { return b.bias; })
      .def_property_readonly("running_mean", [](const nn::BatchNorm& b) { return b.running_mean; })
      .def_property_readonly("running_var", [](const nn::BatchNorm& b) { return b.running_var; });
  py::class_<nn::BatchNorm1d, nn::BatchNorm, std::shared_ptr<nn::BatchNorm1d>>(m, "BatchNorm1d")
      .def(py::init<int64_t, float, float>(), py::arg("num_features"), py::arg("eps") = 1e-5f, py::arg("momentum") = 0.1f);
  py::class_<nn::BatchNorm2d, nn::BatchNorm, std::shared_ptr<nn::BatchNorm2d>>(m, "BatchNorm2d")
      .def(py::init<int64_t, float, float>(), py::arg("num_features"), py::arg("eps") = 1e-5f, py::arg("momentum") = 0.1f);
  py::class_<nn::LayerNorm, nn::Module, std::shared_ptr<nn::LayerNorm>>(m, "LayerNorm")
      .def(py::init([](const py::object& shape, float eps, bool affine) {
             Shape s = py::isinstance<py::int_>(shape) ? Shape{shape.cast<int64_t>()} : shape.cast<Shape>();
             return std::make_shared<nn::LayerNorm>(s, eps, affine);
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5f, py::arg("elementwise_affine") = true)
      .def_property_readonly("weight", [](const nn::LayerNorm& l) { return l.weight; })
      .def_property_readonly("bias", [](const nn::LayerNorm& l) { return l.bias; });
  py::class_<nn::Embedding, nn::Module, std::shared_ptr<nn::Embedding>>(m, "Embedding")
      .def(py::init<int64_t, int64_t>(), py::arg("num_embeddings"), py::arg("embedding_dim"))
      .def_property_readonly("weight", [](const nn::Embedding& e) { return e.weight; });
  py::class_<nn::Dropout, nn::Module, std::shared_ptr<nn::Dropout>>(m, "Dropout").def(py::init<float>(), py::arg("p") = 0.5f);
  py::class_<nn::ReLU, nn::Module, std::shared_ptr<nn::ReLU>>(m, "ReLU").def(py::init<>());
  py::class_<nn::GELU, nn::Module, std::shared_ptr<nn::GELU>>(m, "GELU").def(py::init<>());
  py::class_<nn::Flatten, nn::Module, std::shared_ptr<nn::Flatten>>(m, "Flatten")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  py::class_<nn::CausalSelfAttention, nn::Module, std::shared_ptr<nn::CausalSelfAttention>>(m, "CausalSelfAttention")
      .def(py::init<int64_t, int64_t, float>(), py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0f)
      .def("spread_sequence", [](nn::CausalSelfAttention& a, const py::object& group, const std::string& attention) {
             a.spread_sequence(group_or_default_group(group, "spread_sequence"),
                               parallel::context::context_attention(attention));
           }, py::arg("group") = py::none(), py::arg("attention") = "ring",
           "Context parallelism: the input holds this rank's tokens of each sequence (ring: chunks r and "
           "2N-1-r of 2N; ulysses: part r of N), attention spans the whole sequence over the group");
  py::class_<nn::MixtureOfExperts, nn::Module, std::shared_ptr<nn::MixtureOfExperts>>(m, "MixtureOfExperts")
      .def(py::init([](int64_t embed_dim, int64_t hidden, int64_t experts, int64_t top_k, double capacity_factor,
                       double aux_loss_weight, float dropout) {
             return std::make_shared<nn::MixtureOfExperts>(
                 embed_dim, hidden, nn::MoeConfig{experts, top_k, capacity_factor, aux_loss_weight}, dropout);
           }), py::arg("embed_dim"), py::arg("hidden"), py::arg("experts"), py::arg("top_k") = 2,
           py::arg("capacity_factor") = 1.25, py::arg("aux_loss_weight") = 0.01, py::arg("dropout") = 0.0f)
      .def("take_auxiliary_loss", [](nn::MixtureOfExperts& moe) -> py::object {
             Tensor aux = moe.take_auxiliary_loss();
             return aux.defined() ? py::cast(aux) : py::none();
           }, "The load-balancing loss of the last training forward (None without one), handed over once: add it to the loss")
      .def("place_experts", [](nn::MixtureOfExperts& moe, const py::object& group) {
             moe.place_experts(group_or_default_group(group, "place_experts"));
           }, py::arg("group") = py::none(), "Expert parallelism: keep this rank's E/N experts of the group")
      .def("pool_routing_over", [](nn::MixtureOfExperts& moe, const py::object& group) {
             moe.pool_routing_over(group_or_default_group(group, "pool_routing_over"));
           }, py::arg("group") = py::none(), "Routing statistics (the balancing loss) over every rank's tokens")
      .def_property_readonly("last_routing", [](const nn::MixtureOfExperts& moe) {
             const nn::RoutingStats& r = moe.last_routing();
             return py::dict(py::arg("chosen") = r.chosen, py::arg("choices") = r.choices,
                             py::arg("dropped") = r.dropped, py::arg("aux_loss") = r.aux_loss);
           })
      .def_property_readonly("first_expert", &nn::MixtureOfExperts::first_expert)
      .def_property_readonly("local_experts", &nn::MixtureOfExperts::local_experts)
      .def_property_readonly("router", [](const nn::MixtureOfExperts& moe) { return moe.router; })
      .def_property_readonly("fc_weight", [](const nn::MixtureOfExperts& moe) { return moe.fc_weight; })
      .def_property_readonly("proj_weight", [](const nn::MixtureOfExperts& moe) { return moe.proj_weight; });
  py::class_<nn::TransformerBlock, nn::Module, std::shared_ptr<nn::TransformerBlock>>(m, "TransformerBlock")
      .def(py::init<int64_t, int64_t, float>(), py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0f);
  py::class_<nn::Sequential, nn::Module, std::shared_ptr<nn::Sequential>>(m, "Sequential")
      .def(py::init([](py::args modules) {
        auto seq = std::make_shared<nn::Sequential>();
        for (auto module : modules) seq->push_back(keep_python_alive(module));
        return seq;
      }))
      .def("append", [](py::object self, py::object module) {
        self.cast<nn::Sequential&>().push_back(keep_python_alive(module));
        return self;
      })
      .def("__len__", &nn::Sequential::size)
      .def("__getitem__", [](const nn::Sequential& s, int64_t i) -> Ptr {
        int64_t n = static_cast<int64_t>(s.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw py::index_error("[Sequential] index out of range: " + std::to_string(i) + " of " + std::to_string(n));
        return s[static_cast<size_t>(i)];
      });
  py::class_<nn::VideoEncoder, nn::Module, std::shared_ptr<nn::VideoEncoder>>(m, "VideoEncoder")
      .def(py::init([](int64_t feature_dim, int64_t hidden, int64_t embed_dim) {
             return std::make_shared<nn::VideoEncoder>(nn::MilNceConfig{.feature_dim = feature_dim, .hidden = hidden, .embed_dim = embed_dim});
           }),
           py::arg("feature_dim"), py::arg("hidden") = 256, py::arg("embed_dim") = 128);
  py::class_<nn::TextEncoder, nn::Module, std::shared_ptr<nn::TextEncoder>>(m, "TextEncoder")
      .def(py::init([](int64_t vocab, int64_t embed_dim) {
             return std::make_shared<nn::TextEncoder>(nn::MilNceConfig{.vocab = vocab, .embed_dim = embed_dim});
           }),
           py::arg("vocab"), py::arg("embed_dim") = 128);
  m.def("text_to_video_retrieval", [](const Tensor& text, const Tensor& video) {
    nn::RetrievalMetrics r = nn::text_to_video_retrieval(text, video);
    return py::dict(py::arg("r1") = r.r1, py::arg("r5") = r.r5, py::arg("r10") = r.r10,
                    py::arg("median_rank") = r.median_rank, py::arg("queries") = r.queries);
  }, py::arg("text"), py::arg("video"));
  m.def("make_mlp", &nn::make_mlp, py::arg("sizes"), "Linear-ReLU-...-Linear over the given widths");
  m.def("make_cnn", &nn::make_cnn, py::arg("classes") = 10, "The Fashion-MNIST CNN of examples/cnn.toml");

  auto functional = m.def_submodule("functional", "ops as functions (torch.nn.functional)");
  bind_functional(functional);
}

}  // namespace tessera::python
