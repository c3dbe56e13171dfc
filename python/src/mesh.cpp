// tessera.distributed's model parallelism: DeviceMesh (the dp × pp × tp grid and its subgroups) and
// the Megatron-style tensor-parallel layers, each cut from a whole layer that every rank built from
// the same seed (parallel/tensor/*.h).
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "tessera/parallel/device_mesh.h"
#include "tessera/parallel/tensor/column_parallel_linear.h"
#include "tessera/parallel/tensor/parallel_transformer_block.h"
#include "tessera/parallel/tensor/row_parallel_linear.h"

namespace tessera::python {

void bind_mesh(py::module_& m) {
  using parallel::DeviceMesh;
  py::class_<DeviceMesh, std::shared_ptr<DeviceMesh>>(m, "DeviceMesh")
      .def(py::init([](int dp, int pp, int tp, const py::object& group) {
             auto world = group.is_none() ? default_group_or_null() : group.cast<dist::ProcessGroupPtr>();
             TESSERA_CHECK(world != nullptr, "[DeviceMesh] no process group: call init_process_group() first");
             py::gil_scoped_release release;  // builds subgroups: collective
             return std::make_shared<DeviceMesh>(world, parallel::MeshShape{dp, pp, tp});
           }),
           py::arg("dp") = 0, py::arg("pp") = 1, py::arg("tp") = 1, py::arg("group") = py::none(),
           "dp = 0: the world size over pp·tp")
      .def_property_readonly("dp_group", &DeviceMesh::dp_group)
      .def_property_readonly("pp_group", &DeviceMesh::pp_group)
      .def_property_readonly("tp_group", &DeviceMesh::tp_group)
      .def_property_readonly("shape", [](const DeviceMesh& d) {
        return py::dict(py::arg("dp") = d.shape().dp, py::arg("pp") = d.shape().pp, py::arg("tp") = d.shape().tp);
      })
      .def_property_readonly("coordinates", [](const DeviceMesh& d) {
        const auto& c = d.coordinates();
        return py::dict(py::arg("dp") = c.dp, py::arg("pp") = c.pp, py::arg("tp") = c.tp);
      })
      .def("__repr__", &DeviceMesh::describe);

  using parallel::tensor::ColumnParallelLinear;
  using parallel::tensor::ParallelTransformerBlock;
  using parallel::tensor::RowParallelLinear;
  py::class_<ColumnParallelLinear, nn::Module, std::shared_ptr<ColumnParallelLinear>>(m, "ColumnParallelLinear")
      .def(py::init([](const nn::Linear& full, const dist::ProcessGroupPtr& group, bool gather_output,
                       bool sequence_parallel, int64_t overlap_chunks) {
             parallel::tensor::ColumnParallelOptions options;
             options.gather_output = gather_output;
             options.sequence = {sequence_parallel, overlap_chunks};
             return std::make_shared<ColumnParallelLinear>(full, group, options);
           }),
           py::arg("full"), py::arg("group"), py::arg("gather_output") = true, py::arg("sequence_parallel") = false,
           py::arg("overlap_chunks") = 4,
           "This rank's block of the output features of `full`; sequence_parallel: the input is this rank's "
           "tokens (B, T/world, in), all-gathered in overlap_chunks pieces while the matmul runs");
  py::class_<RowParallelLinear, nn::Module, std::shared_ptr<RowParallelLinear>>(m, "RowParallelLinear")
      .def(py::init([](const nn::Linear& full, const dist::ProcessGroupPtr& group, bool input_is_parallel,
                       bool sequence_parallel, int64_t overlap_chunks) {
             parallel::tensor::RowParallelOptions options;
             options.input_is_parallel = input_is_parallel;
             options.sequence = {sequence_parallel, overlap_chunks};
             return std::make_shared<RowParallelLinear>(full, group, options);
           }),
           py::arg("full"), py::arg("group"), py::arg("input_is_parallel") = true, py::arg("sequence_parallel") = false,
           py::arg("overlap_chunks") = 4,
           "This rank's block of the input features of `full`; the outputs are summed over the group "
           "(sequence_parallel: reduce-scattered over the tokens, (B, T/world, out), in overlap_chunks pieces)");
  py::class_<ParallelTransformerBlock, nn::Module, std::shared_ptr<ParallelTransformerBlock>>(m, "ParallelTransformerBlock")
      .def(py::init([](const nn::TransformerBlock& full, const dist::ProcessGroupPtr& group, bool sequence_parallel,
                       int64_t overlap_chunks) {
             return std::make_shared<ParallelTransformerBlock>(
                 full, group, parallel::tensor::SequenceParallel{sequence_parallel, overlap_chunks});
           }),
           py::arg("full"), py::arg("group"), py::arg("sequence_parallel") = false, py::arg("overlap_chunks") = 4,
           "sequence_parallel: takes and gives this rank's tokens (B, T/world, C)")
      .def("token_parameters", &ParallelTransformerBlock::token_parameters,
           "The parameters whose gradients are partial under sequence parallelism: add them up over the group "
           "with sum_partial_gradients after the backward");
  m.def("scatter_to_sequence_parallel_region", &parallel::tensor::scatter_to_sequence_parallel_region,
        py::arg("x"), py::arg("group"), "(B, T, C) -> this rank's tokens (B, T/world, C); backward all-gathers");
  m.def("sum_partial_gradients", [](const std::vector<Tensor>& parameters, dist::ProcessGroup& group) {
    py::gil_scoped_release release;
    parallel::tensor::sum_partial_gradients(parameters, group);
  }, py::arg("parameters"), py::arg("group"), "Adds each parameter's gradient up over the group (one all-reduce)");
}

}  // namespace tessera::python
