// tessera.distributed.ps: a parameter-server job from Python. `tessera run --servers S --workers W
// -- python3 script.py` starts S + W copies of the script; each asks is_server() and either serves
// (run_server) or trains a model through a Worker, whose step(lr) pushes the gradients and pulls
// the next values (the optimizer runs on the servers). The wiring is the trainer's (train/ps_job.h).
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/parallel/ps/worker.h"
#include "tessera/train/ps_job.h"

namespace tessera::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

train::TrainConfig ps_config(const std::string& optimizer, double momentum, double weight_decay, bool nesterov,
                             std::pair<double, double> betas, double eps, const std::string& mode, int64_t staleness,
                             double timeout_s) {
  train::TrainConfig config;
  config.optimizer.name = optimizer;
  config.optimizer.momentum = momentum;
  config.optimizer.weight_decay = weight_decay;
  config.optimizer.nesterov = nesterov;
  config.optimizer.beta1 = betas.first;
  config.optimizer.beta2 = betas.second;
  config.optimizer.eps = eps;
  config.distributed.strategy = "ps";
  config.distributed.ps_mode = mode;
  config.distributed.staleness = staleness;
  TESSERA_CHECK(timeout_s > 0, "[ps] timeout must be positive, got ", timeout_s, " s");
  config.distributed.timeout_s = timeout_s;
  parallel::ps::parse_mode(mode);  // a ValueError naming the mode now, not in the server
  return config;
}

}  // namespace

void bind_ps(py::module_& m) {
  m.def("is_server", [] {
    return dist::launcher::ps_role_from_environment().role == dist::launcher::PsRoleEnv::Role::kServer;
  }, "True in the processes `tessera run --servers S` made servers (TESSERA_ROLE=server)");
  m.def("run_server",
        [](const std::string& optimizer, double momentum, double weight_decay, bool nesterov,
           std::pair<double, double> betas, double eps, const std::string& mode, int64_t staleness, double timeout) {
          auto config = ps_config(optimizer, momentum, weight_decay, nesterov, betas, eps, mode, staleness, timeout);
          auto role = dist::launcher::ps_role_from_environment();
          TESSERA_CHECK(role.role == dist::launcher::PsRoleEnv::Role::kServer,
                        "[ps.run_server] this process is not a server: start the script with `tessera run --servers S "
                        "--workers W -- python3 ...` and call run_server() only where ps.is_server()");
          parallel::ps::ServerReport r;
          {
            py::gil_scoped_release release;
            r = train::serve_parameters(config, role);
          }
          py::dict report;
          report["server"] = role.server_rank;
          report["updates"] = r.updates;
          report["pushes"] = r.pushes;
          report["pulls"] = r.pulls;
          report["bytes_received"] = r.bytes_received;
          report["bytes_sent"] = r.bytes_sent;
          report["max_staleness"] = r.max_staleness;
          report["elements"] = r.elements;
          report["finished_workers"] = r.finished_workers;
          report["lost_workers"] = r.lost_workers;
          return report;
        },
        py::arg("optimizer") = "sgd", py::arg("momentum") = 0.0, py::arg("weight_decay") = 0.0,
        py::arg("nesterov") = false, py::arg("betas") = std::make_pair(0.9, 0.999), py::arg("eps") = 1e-8,
        py::arg("mode") = "sync", py::arg("staleness") = 2, py::arg("timeout") = 300.0,
        "Serve this server's shard until every worker has finished or been lost; returns its report");

  py::class_<parallel::ps::PsWorker>(m, "Worker")
      .def(py::init([](const py::object& model, double timeout) {
             train::TrainConfig config;
             TESSERA_CHECK(timeout > 0, "[ps.Worker] timeout must be positive, got ", timeout, " s");
             config.distributed.timeout_s = timeout;
             auto held = keep_python_alive(model);
             py::gil_scoped_release release;
             return new parallel::ps::PsWorker(held, train::ps_client_options_from_env(config));
           }),
           py::arg("model"), py::arg("timeout") = 300.0)
      .def("start", &parallel::ps::PsWorker::start, py::arg("start_step") = 0, py::arg("restore_dir") = "", Release(),
           "Worker 0 initialises the servers from its model; every worker pulls the values to start from")
      .def("step", &parallel::ps::PsWorker::step, py::arg("lr"), Release(),
           "After backward: push this step's gradients (with the lr) and pull the next step's values")
      .def("refresh", &parallel::ps::PsWorker::refresh, Release())
      .def("finish", &parallel::ps::PsWorker::finish, Release())
      .def_property_readonly("bytes_communicated", [](const parallel::ps::PsWorker& w) { return w.counters().total_bytes(); });
}

}  // namespace tessera::python
