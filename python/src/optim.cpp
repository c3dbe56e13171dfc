// tessera.optim: SGD, Adam, AdamW, LAMB, LARS and the learning-rate schedulers, with PyTorch's
// argument names (lr, momentum, betas, weight_decay, ...). step() releases the GIL.
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/lamb.h"
#include "tessera/optim/lars.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/sgd.h"

namespace tessera::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// model.parameters(), a list, or any iterable of tensors.
std::vector<Tensor> tensors_from(const py::iterable& params) {
  std::vector<Tensor> out;
  for (auto p : params) out.push_back(p.cast<Tensor>());
  TESSERA_CHECK(!out.empty(), "[optim] the optimizer got an empty parameter list");
  return out;
}


}  // namespace

void bind_optim(py::module_& m) {
  py::class_<optim::Optimizer>(m, "Optimizer")
      .def("step", &optim::Optimizer::step, Release())
      .def("zero_grad", &optim::Optimizer::zero_grad, py::arg("set_to_none") = true)
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_property_readonly("step_count", &optim::Optimizer::step_count)
      .def_property_readonly("params", &optim::Optimizer::params)
      .def("state_dict", [](const optim::Optimizer& o) { return to_ordered_dict(o.state_dict()); })
      .def("load_state_dict", [](optim::Optimizer& o, const py::dict& state) {
        o.load_state_dict(state_dict_from(state));
      });

  py::class_<optim::SGD, optim::Optimizer>(m, "SGD")
      .def(py::init([](const py::iterable& params, double lr, double momentum, double dampening, double weight_decay,
                       bool nesterov) {
             return new optim::SGD(tensors_from(params), optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov});
           }),
           py::arg("params"), py::arg("lr") = 0.01, py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  auto adam_options = [](double lr, std::pair<double, double> betas, double eps, double weight_decay) {
    return optim::AdamOptions{lr, betas.first, betas.second, eps, weight_decay};
  };
  py::class_<optim::Adam, optim::Optimizer>(m, "Adam")
      .def(py::init([adam_options](const py::iterable& params, double lr, std::pair<double, double> betas, double eps,
                                   double weight_decay) {
             return new optim::Adam(tensors_from(params), adam_options(lr, betas, eps, weight_decay));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0);
  py::class_<optim::AdamW, optim::Adam>(m, "AdamW")
      .def(py::init([adam_options](const py::iterable& params, double lr, std::pair<double, double> betas, double eps,
                                   double weight_decay) {
             return new optim::AdamW(tensors_from(params), adam_options(lr, betas, eps, weight_decay));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.01);
  py::class_<optim::LAMB, optim::Optimizer>(m, "LAMB")
      .def(py::init([](const py::iterable& params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay) {
             return new optim::LAMB(tensors_from(params), optim::LAMBOptions{lr, betas.first, betas.second, eps, weight_decay});
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999), py::arg("eps") = 1e-6,
           py::arg("weight_decay") = 0.0);
  py::class_<optim::LARS, optim::Optimizer>(m, "LARS")
      .def(py::init([](const py::iterable& params, double lr, double momentum, double weight_decay, double trust) {
             optim::LARSOptions options;
             options.lr = lr;
             options.momentum = momentum;
             options.weight_decay = weight_decay;
             options.trust_coefficient = trust;
             return new optim::LARS(tensors_from(params), options);
           }),
           py::arg("params"), py::arg("lr") = 1.0, py::arg("momentum") = 0.9, py::arg("weight_decay") = 0.0,
           py::arg("trust_coefficient") = 0.001);
  m.def("clip_grad_norm_", [](const py::iterable& params, double max_norm) { return optim::clip_grad_norm(tensors_from(params), max_norm); },
        py::arg("parameters"), py::arg("max_norm"));
  // fp16 loss scaling's state machine; tessera.optim.GradScaler (python/tessera/optim) gives it
  // torch.cuda.amp.GradScaler's methods.
  py::class_<optim::GradScaler>(m, "_ScaleState")
      .def(py::init([](double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval) {
             return optim::GradScaler({init_scale, growth_factor, backoff_factor, growth_interval});
           }),
           py::arg("init_scale"), py::arg("growth_factor"), py::arg("backoff_factor"), py::arg("growth_interval"))
      .def_property_readonly("scale", &optim::GradScaler::scale)
      .def_property_readonly("skipped_steps", &optim::GradScaler::skipped_steps)
      .def_property_readonly("growth_tracker", &optim::GradScaler::growth_tracker)
      .def("update", &optim::GradScaler::update, py::arg("found_inf"))
      .def("restore", &optim::GradScaler::restore, py::arg("scale"), py::arg("growth_tracker"), py::arg("skipped_steps"));
  m.def("_unscale_gradients", [](const py::iterable& params, double inv_scale) {
          std::vector<Tensor> ps = tensors_from(params);
          py::gil_scoped_release release;
          return optim::unscale_gradients(ps, inv_scale);
        },
        py::arg("parameters"), py::arg("inv_scale"));

  auto sched = m.def_submodule("lr_scheduler", "learning-rate schedules (torch.optim.lr_scheduler)");
  py::class_<optim::LRScheduler, std::shared_ptr<optim::LRScheduler>>(sched, "LRScheduler")
      .def("step", &optim::LRScheduler::step)
      .def("get_last_lr", [](const optim::LRScheduler& s) { return std::vector<double>{s.base_lr() * s.factor(s.position())}; })
      .def_property_readonly("last_epoch", &optim::LRScheduler::position);
  // Each schedule keeps its optimizer alive (keep_alive<1, 2>): it holds a reference to it.
  py::class_<optim::StepLR, optim::LRScheduler, std::shared_ptr<optim::StepLR>>(sched, "StepLR")
      .def(py::init<optim::Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("step_size"),
           py::arg("gamma") = 0.1, py::keep_alive<1, 2>());
  py::class_<optim::CosineAnnealingLR, optim::LRScheduler, std::shared_ptr<optim::CosineAnnealingLR>>(sched, "CosineAnnealingLR")
      .def(py::init<optim::Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("T_max"), py::arg("eta_min") = 0.0,
           py::keep_alive<1, 2>());
  py::class_<optim::LinearWarmupLR, optim::LRScheduler, std::shared_ptr<optim::LinearWarmupLR>>(sched, "LinearWarmupLR")
      .def(py::init<optim::Optimizer&, int64_t, double, std::shared_ptr<optim::LRScheduler>>(), py::arg("optimizer"),
           py::arg("warmup_steps"), py::arg("start_factor") = 0.0, py::arg("after") = nullptr, py::keep_alive<1, 2>());
}

}  // namespace tessera::python
