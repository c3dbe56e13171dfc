// PYBIND11_MODULE(_tessera): the extension's entry point. See bindings.h for the layout.
#include "python/src/bindings.h"

PYBIND11_MODULE(_tessera, m) {
  using namespace tessera::python;
  m.doc() = "tessera: distributed deep-learning training (C++ engine); import tessera, not this module";
  bind_errors(m);
  bind_tensor(m);
  auto autograd = m.def_submodule("autograd", "Functions written in Python, gradcheck");
  bind_autograd(autograd);
  auto nn = m.def_submodule("nn", "layers, Module and functional ops");
  bind_nn(nn);
  auto optim = m.def_submodule("optim", "optimizers and learning-rate schedulers");
  bind_optim(optim);
  auto data = m.def_submodule("data", "datasets, samplers and the loader");
  bind_data(data);
  auto distributed = m.def_submodule("distributed", "process groups, collectives, DistributedDataParallel");
  bind_distributed(distributed);
  bind_mesh(distributed);
  auto ps = distributed.def_submodule("ps", "parameter servers: is_server, run_server, Worker");
  bind_ps(ps);
  auto train = m.def_submodule("train", "train.run(config): the trainer behind `tessera train`");
  bind_train(train);
  auto serve = m.def_submodule("serve", "serve.Predictor: a checkpoint's model answering predictions");
  bind_serve(serve);
  auto observe = m.def_submodule("observe", "the run report, TensorBoard event files, merged timelines");
  bind_observe(observe);
}
