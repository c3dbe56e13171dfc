// tessera.train.run (the trainer `tessera train` runs, on a TOML config's text), tessera.train.plan
// (`tessera plan`'s dry run) and tessera.save /
// tessera.load (safetensors files of named tensors, PyTorch's state_dict layout).
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "python/src/bindings.h"
#include "tessera/io/safetensors.h"
#include "tessera/train/config.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/job_plan.h"
#include "tessera/train/run.h"

namespace tessera::python {

void bind_train(py::module_& m) {
  m.def("_run", [](const std::string& toml_text, const std::string& source, const std::vector<std::string>& overrides,
                   const std::string& resume) {
          // No text: `source` is a config file's path.
          train::TrainConfig config = toml_text.empty() ? train::load_config(source) : train::parse_config(toml_text, source);
          for (const auto& o : overrides) train::apply_override(config, o);
          train::RunOptions options;
          options.resume = resume;
          train::RunOutcome outcome;
          {
            py::gil_scoped_release release;
            outcome = train::run(config, options);
          }
          py::dict result;
          result["steps"] = outcome.fit.steps;
          result["interrupted"] = outcome.interrupted;
          result["server"] = outcome.server;
          result["checkpoint"] = outcome.fit.last_checkpoint;
          if (outcome.fit.last_eval) {
            result["loss"] = outcome.fit.last_eval->loss;
            const double accuracy = outcome.fit.last_eval->accuracy;
            result["accuracy"] = std::isnan(accuracy) ? py::object(py::none()) : py::float_(accuracy);
          }
          return result;
        }, py::arg("toml_text"), py::arg("source"), py::arg("overrides"), py::arg("resume"));

  // tessera.train.plan: the plan's JSON (plan_json) with its printed report under "report".
  m.def("_plan", [](const std::string& toml_text, const std::string& source, const std::vector<std::string>& overrides,
                    int world, int hosts, int steps, bool predict, double link_gbit, double latency_us, int cores) {
          train::TrainConfig config = toml_text.empty() ? train::load_config(source) : train::parse_config(toml_text, source);
          for (const auto& o : overrides) train::apply_override(config, o);
          plan::PlanOptions options;
          options.world = world;
          options.hosts = hosts;
          options.steps = steps;
          std::string text;
          {
            py::gil_scoped_release release;
            plan::JobPlan job = plan::make_plan(config, options, source);
            job.link_gbit = link_gbit;
            nlohmann::json j = plan::plan_json(job);
            j["report"] = plan::plan_text(job);
            if (predict) {
              const plan::CostInputs inputs = plan::measured_cost_inputs(link_gbit, latency_us, cores);
              const plan::StepPrediction p = plan::predict_step(job, config, inputs);
              j["prediction"] = plan::prediction_json(p);
              j["report"] = j["report"].get<std::string>() + plan::prediction_text(p, inputs);
            }
            text = j.dump();
          }
          return text;
        }, py::arg("toml_text"), py::arg("source"), py::arg("overrides"), py::arg("world"), py::arg("hosts"),
        py::arg("steps"), py::arg("predict"), py::arg("link_gbit"), py::arg("latency_us"), py::arg("cores"));

  m.def("_save", [](const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
        py::gil_scoped_release release;
        io::save_safetensors(path, tensors, metadata);
      }, py::arg("tensors"), py::arg("path"), py::arg("metadata"));
  m.def("_load", [](const std::string& path) {
        io::SafetensorsFile file;
        {
          py::gil_scoped_release release;
          file = io::load_safetensors(path);
        }
        return py::make_tuple(file.tensors, file.metadata);
      }, py::arg("path"));
}

}  // namespace tessera::python
