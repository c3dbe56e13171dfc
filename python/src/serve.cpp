// tessera.serve.Predictor (a checkpoint's model ready to answer, as `tessera serve` runs it) and
// tessera.observe (the run report, TensorBoard event files, merging timelines).
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "tessera/observe/run_report.h"
#include "tessera/observe/tensorboard.h"
#include "tessera/observe/trace.h"
#include "tessera/serve/predictor.h"
#include "tessera/util/clock.h"

namespace tessera::python {

void bind_serve(py::module_& m) {
  py::class_<serve::Predictor, std::shared_ptr<serve::Predictor>>(
      m, "Predictor",
      "A checkpoint's model in eval mode without gradients: Predictor(path) with a run directory, a checkpoint "
      "directory or model.safetensors")
      .def(py::init([](const std::string& path) {
             py::gil_scoped_release release;
             return serve::Predictor::load(path);
           }),
           py::arg("path"))
      .def_property_readonly("model_name", &serve::Predictor::model_name)
      .def_property_readonly("checkpoint", &serve::Predictor::checkpoint)
      .def_property_readonly("generates_text", &serve::Predictor::generates_text)
      .def_property_readonly("outputs", &serve::Predictor::outputs)
      .def_property_readonly("sample_shape", [](const serve::Predictor& p) { return p.sample_shape(); })
      .def("predict",
           [](serve::Predictor& p, const Tensor& batch) {
             py::gil_scoped_release release;
             return p.predict(batch);
           },
           py::arg("batch"), "[n, *sample_shape] -> [n, outputs]: class probabilities, or values for a regression")
      .def("generate",
           [](serve::Predictor& p, const std::string& prompt, int64_t tokens, float temperature, int64_t top_k,
              uint64_t seed) {
             py::gil_scoped_release release;
             return p.generate({prompt, tokens, temperature, top_k, seed});
           },
           py::arg("prompt"), py::arg("tokens") = 100, py::arg("temperature") = 0.8f, py::arg("top_k") = 0,
           py::arg("seed") = 0, "The char-LM's continuation of the prompt");
}

void bind_observe(py::module_& m) {
  m.def("write_report", &observe::write_run_report, py::arg("run_dir"), py::arg("output") = "",
        "Writes the run's HTML report (RUN_DIR/report.html unless output is given); returns its path");
  m.def("merge_traces", &observe::merge_chrome_traces, py::arg("paths"),
        "Every rank's Chrome trace on one timeline: the merged JSON text");
  py::class_<observe::TensorBoardWriter>(m, "TensorBoardWriter", "TensorBoard event files in a directory")
      .def(py::init<const std::string&>(), py::arg("log_dir"))
      .def_property_readonly("path", &observe::TensorBoardWriter::path)
      .def("add_scalars",
           [](observe::TensorBoardWriter& w, int64_t step, const std::map<std::string, double>& scalars,
              py::object wall_time) {
             std::vector<std::pair<std::string, double>> values(scalars.begin(), scalars.end());
             const double t = wall_time.is_none() ? unix_seconds() : wall_time.cast<double>();
             w.write_scalars(step, values, t);
           },
           py::arg("step"), py::arg("scalars"), py::arg("wall_time") = py::none(),
           "One event of {tag: value} at step (flushed)");
}

}  // namespace tessera::python
