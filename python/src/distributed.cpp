// tessera.distributed: torch.distributed's names over tessera's process groups. init_process_group
// joins the job the way `tessera run`, mpirun or srun started it (or makes a group of one);
// collectives work in place on tensors and release the GIL while they wait; DistributedDataParallel
// wraps a Module (written in Python or not) and averages gradients while backward runs.
#include <pybind11/stl.h>

#include <optional>

#include "python/src/bindings.h"
#include "tessera/dist/init.h"
#include "tessera/parallel/ddp/distributed_data_parallel.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/functional.h"
#include "tessera/parallel/kmeans.h"
#include "tessera/parallel/zero/zero_data_parallel.h"
#include "tessera/optim/optimizer.h"

namespace tessera::python {
namespace {

dist::ProcessGroupPtr g_default_group;

dist::ProcessGroupPtr group_or_default(const py::object& group, const char* op) {
  if (!group.is_none()) return group.cast<dist::ProcessGroupPtr>();
  if (!g_default_group)
    throw ValueError(std::string("[tessera.distributed.") + op +
                     "] the default process group is not initialised: call init_process_group() first");
  return g_default_group;
}

dist::Milliseconds milliseconds_from(const py::object& timeout) {
  double seconds = py::hasattr(timeout, "total_seconds") ? timeout.attr("total_seconds")().cast<double>()
                                                         : timeout.cast<double>();
  TESSERA_CHECK(seconds > 0, "[init_process_group] timeout must be positive, got ", seconds, " s");
  return dist::Milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Runs the collective, then waits for it unless async_op (then the caller gets the Work).
py::object finish(dist::WorkPtr work, bool async_op) {
  if (async_op) return py::cast(work);
  {
    py::gil_scoped_release release;
    work->wait();
  }
  return py::none();
}

// `with ddp.no_sync():` — gradients accumulate locally until the block ends.
struct NoSyncContext {
  parallel::ddp::DistributedDataParallel* ddp;
  std::unique_ptr<parallel::ddp::DistributedDataParallel::NoSync> guard;
};

}  // namespace

dist::ProcessGroupPtr default_group_or_null() { return g_default_group; }

dist::ProcessGroupPtr group_or_default_group(const py::object& group, const char* op) {
  return group_or_default(group, op);
}

void bind_distributed(py::module_& m) {
  py::enum_<dist::ReduceOp>(m, "ReduceOp")
      .value("SUM", dist::ReduceOp::Sum)
      .value("AVG", dist::ReduceOp::Avg)
      .value("MAX", dist::ReduceOp::Max)
      .value("MIN", dist::ReduceOp::Min);

  py::class_<dist::Work, dist::WorkPtr>(m, "Work")
      .def("wait", [](dist::Work& w, const py::object& timeout) {
             if (timeout.is_none()) {
               py::gil_scoped_release release;
               w.wait();
             } else {
               dist::Milliseconds ms = milliseconds_from(timeout);
               py::gil_scoped_release release;
               w.wait(ms);
             }
             return true;
           }, py::arg("timeout") = py::none());

  py::class_<dist::ProcessGroup, dist::ProcessGroupPtr>(m, "ProcessGroup")
      .def("rank", &dist::ProcessGroup::rank)
      .def("size", &dist::ProcessGroup::size)
      .def_property_readonly("backend", [](const dist::ProcessGroup& g) { return std::string(g.backend_name()); })
      .def("__repr__", [](const dist::ProcessGroup& g) {
        return "ProcessGroup(rank=" + std::to_string(g.rank()) + ", size=" + std::to_string(g.size()) + ", backend=" +
               g.backend_name() + ")";
      });

  m.def("init_process_group", [](const std::string& backend, const py::object& timeout) {
          TESSERA_CHECK(!g_default_group, "[init_process_group] the default process group is already initialised "
                                          "(rank ", g_default_group->rank(), " of ", g_default_group->size(), ")");
          dist::InitOptions options;
          options.backend = backend;
          options.timeout = milliseconds_from(timeout);
          py::gil_scoped_release release;
          g_default_group = dist::init_process_group(options);
          return g_default_group;
        }, py::arg("backend") = "auto", py::arg("timeout") = 300.0,
        "Join the job tessera run, mpirun or srun started (a group of one when started alone)");
  m.def("destroy_process_group", [] {
    py::gil_scoped_release release;
    g_default_group.reset();
  });
  m.def("is_initialized", [] { return g_default_group != nullptr; });
  m.def("launched_as_job", &dist::launched_as_job);
  m.def("get_rank", [](const py::object& group) { return group_or_default(group, "get_rank")->rank(); },
        py::arg("group") = py::none());
  m.def("get_world_size", [](const py::object& group) { return group_or_default(group, "get_world_size")->size(); },
        py::arg("group") = py::none());
  m.def("new_group", [](const std::vector<int>& ranks) -> py::object {
    auto parent = group_or_default(py::none(), "new_group");
    dist::ProcessGroupPtr child;
    {
      py::gil_scoped_release release;
      child = parent->new_group(ranks);
    }
    return child ? py::cast(child) : py::none();
  }, py::arg("ranks"));

  m.def("all_reduce", [](const Tensor& t, dist::ReduceOp op, const py::object& group, bool async_op) {
          return finish(group_or_default(group, "all_reduce")->allreduce(t, op), async_op);
        }, py::arg("tensor"), py::arg("op") = dist::ReduceOp::Sum, py::arg("group") = py::none(), py::arg("async_op") = false);
  m.def("broadcast", [](const Tensor& t, int src, const py::object& group, bool async_op) {
          return finish(group_or_default(group, "broadcast")->broadcast(t, src), async_op);
        }, py::arg("tensor"), py::arg("src"), py::arg("group") = py::none(), py::arg("async_op") = false);
  m.def("reduce", [](const Tensor& t, int dst, dist::ReduceOp op, const py::object& group, bool async_op) {
          return finish(group_or_default(group, "reduce")->reduce(t, op, dst), async_op);
        }, py::arg("tensor"), py::arg("dst"), py::arg("op") = dist::ReduceOp::Sum, py::arg("group") = py::none(),
        py::arg("async_op") = false);
  m.def("all_gather_into_tensor", [](const Tensor& output, const Tensor& input, const py::object& group, bool async_op) {
          return finish(group_or_default(group, "all_gather_into_tensor")->allgather(input, output), async_op);
        }, py::arg("output_tensor"), py::arg("input_tensor"), py::arg("group") = py::none(), py::arg("async_op") = false);
  m.def("all_gather", [](py::list outputs, const Tensor& input, const py::object& group) {
          auto g = group_or_default(group, "all_gather");
          TESSERA_CHECK(static_cast<int>(outputs.size()) == g->size(), "[all_gather] tensor_list has ", outputs.size(),
                        " tensors for a group of ", g->size());
          Shape shape = input.shape();
          shape.insert(shape.begin(), g->size());
          Tensor gathered = Tensor::empty(shape, input.dtype());
          finish(g->allgather(input.contiguous(), gathered), false);
          for (int r = 0; r < g->size(); ++r) {
            Tensor out = outputs[r].cast<Tensor>();
            copy_(out, gathered.slice(0, r, r + 1).squeeze(0));
          }
        }, py::arg("tensor_list"), py::arg("tensor"), py::arg("group") = py::none());
  m.def("reduce_scatter_tensor", [](const Tensor& output, const Tensor& input, dist::ReduceOp op, const py::object& group,
                                    bool async_op) {
          return finish(group_or_default(group, "reduce_scatter_tensor")->reduce_scatter(input, output, op), async_op);
        }, py::arg("output"), py::arg("input"), py::arg("op") = dist::ReduceOp::Sum, py::arg("group") = py::none(),
        py::arg("async_op") = false);
  m.def("symmetric_zeros", [](const Shape& size, DType dtype, const py::object& group) {
          auto g = group_or_default(group, "symmetric_zeros");
          py::gil_scoped_release release;
          return g->symmetric_zeros(size, dtype);
        }, py::arg("size"), py::kw_only(), py::arg("dtype") = DType::Float32, py::arg("group") = py::none(),
        "Zeros in memory every rank of the group can reach (collective); all_reduce of it skips the copies "
        "through the backend's buffers (shm; ordinary zeros elsewhere). DDP's buckets live there.");
  m.def("barrier", [](const py::object& group) { finish(group_or_default(group, "barrier")->barrier(), false); },
        py::arg("group") = py::none());
  m.def("send", [](const Tensor& t, int dst, const py::object& group, int tag) {
          finish(group_or_default(group, "send")->send(t, dst, tag), false);
        }, py::arg("tensor"), py::arg("dst"), py::arg("group") = py::none(), py::arg("tag") = 0);
  m.def("recv", [](const Tensor& t, int src, const py::object& group, int tag) {
          finish(group_or_default(group, "recv")->recv(t, src, tag), false);
        }, py::arg("tensor"), py::arg("src"), py::arg("group") = py::none(), py::arg("tag") = 0);
  m.def("all_gather_with_grad", [](const Tensor& x, const py::object& group) {
          auto g = group_or_default(group, "all_gather_with_grad");
          py::gil_scoped_release release;
          return parallel::all_gather_with_grad(x, *g);
        }, py::arg("tensor"), py::arg("group") = py::none(),
        "Rows of every rank in rank order; backward reduce-scatters the gradient (contrastive losses)");

  m.def("all_to_all_with_grad", [](const Tensor& x, const py::object& group) {
          auto g = group_or_default(group, "all_to_all_with_grad");
          py::gil_scoped_release release;
          return parallel::all_to_all(x, *g);
        }, py::arg("tensor"), py::arg("group") = py::none(),
        "Rows cut into one block per rank, block j to rank j; backward sends the gradient back the same way "
        "(expert parallelism's dispatch and combine)");

  m.def("kmeans", [](const Tensor& points, const Tensor& initial, int64_t max_iterations, double tolerance,
                     const py::object& group) {
          dist::ProcessGroupPtr g = group.is_none() ? default_group_or_null() : group.cast<dist::ProcessGroupPtr>();
          parallel::KMeansResult r;
          {
            py::gil_scoped_release release;
            r = parallel::kmeans(points, initial, {max_iterations, tolerance}, g.get());
          }
          return py::dict(py::arg("centroids") = r.centroids, py::arg("iterations") = r.iterations,
                          py::arg("inertia") = r.inertia, py::arg("converged") = r.converged);
        }, py::arg("points"), py::arg("initial"), py::arg("max_iterations") = 300, py::arg("tolerance") = 1e-4,
        py::arg("group") = py::none(),
        "Data-parallel k-means over this rank's points (one all-reduce per iteration); alone: the default group or none");

  using Ddp = parallel::ddp::DistributedDataParallel;
  py::class_<NoSyncContext>(m, "_NoSync")
      .def("__enter__", [](NoSyncContext& c) { c.guard = c.ddp->no_sync(); })
      .def("__exit__", [](NoSyncContext& c, py::args) { c.guard.reset(); });
  py::class_<Ddp>(m, "DistributedDataParallel")
      .def(py::init([](const py::object& module, const py::object& group, std::optional<double> bucket_cap_mb,
                       bool find_unused, bool broadcast_buffers, const std::string& comm_hook, bool uneven_inputs) {
             parallel::ddp::DdpOptions options;  // bucket_cap_mb None: auto (parallel/ddp/reducer.h)
             if (bucket_cap_mb) {
               TESSERA_CHECK(*bucket_cap_mb > 0, "[DistributedDataParallel] bucket_cap_mb must be positive (or None: "
                             "auto), got ", *bucket_cap_mb);
               options.bucket_cap_bytes = parallel::ddp::bucket_cap_from_mb(*bucket_cap_mb);
             }
             options.find_unused_parameters = find_unused;
             options.broadcast_buffers = broadcast_buffers;
             options.comm_hook = comm_hook;
             options.uneven_inputs = uneven_inputs;
             auto held = keep_python_alive(module);
             auto g = group_or_default(group, "DistributedDataParallel");
             py::gil_scoped_release release;
             return new Ddp(held, g, options);
           }),
           py::arg("module"), py::arg("process_group") = py::none(), py::arg("bucket_cap_mb") = py::none(),
           py::arg("find_unused_parameters") = false, py::arg("broadcast_buffers") = true, py::arg("comm_hook") = "none",
           py::arg("uneven_inputs") = false)
      .def("forward", &Ddp::forward, py::call_guard<py::gil_scoped_release>())
      .def("__call__", &Ddp::forward, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("module", [](const Ddp& d) { return d.module_ptr(); })
      .def("parameters", [](Ddp& d) { return d.module().parameters(); })
      .def("named_parameters", [](Ddp& d) {
        py::list out;
        for (auto& [n, t] : d.module().named_parameters()) out.append(py::make_tuple(n, t));
        return out;
      })
      .def("state_dict", [](Ddp& d) { return py::cast(d.module_ptr()).attr("state_dict")(); })
      .def("train", [](Ddp& d, bool mode) { d.module().train(mode); }, py::arg("mode") = true)
      .def("eval", [](Ddp& d) { d.module().eval(); })
      .def("no_sync", [](Ddp& d) { return NoSyncContext{&d, nullptr}; }, py::keep_alive<0, 1>())
      .def("join", &Ddp::join, py::call_guard<py::gil_scoped_release>());

  // ZeRO stages 1-3 (FSDP): the optimizer is built over zero.parameters() (this rank's pieces) and
  // stepped through zero.step(opt), as in C++ (parallel/zero/zero_data_parallel.h).
  using Zero = parallel::zero::ZeroDataParallel;
  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<Zero>(m, "ZeroDataParallel")
      .def(py::init([](const py::object& module, int stage, const py::object& group, double bucket_cap_mb,
                       const std::string& wrap_policy, double min_unit_mb, bool prefetch) {
             parallel::zero::ZeroOptions options;
             options.stage = stage;
             options.bucket_cap_bytes = static_cast<size_t>(bucket_cap_mb * (1 << 20));
             options.wrap_policy = wrap_policy;
             options.min_unit_bytes = static_cast<size_t>(min_unit_mb * (1 << 20));
             options.prefetch = prefetch;
             auto held = keep_python_alive(module);
             auto g = group_or_default(group, "ZeroDataParallel");
             py::gil_scoped_release release;
             return new Zero(held, g, options);
           }),
           py::arg("module"), py::arg("stage") = 2, py::arg("process_group") = py::none(),
           py::arg("bucket_cap_mb") = 25.0, py::arg("wrap_policy") = "layer", py::arg("min_unit_mb") = 1.0,
           py::arg("prefetch") = true)
      .def("forward", &Zero::forward, Release())
      .def("__call__", &Zero::forward, Release())
      .def("parameters", &Zero::parameters, "This rank's pieces: build the optimizer over these")
      .def("attach", &Zero::attach, py::arg("optimizer"))
      .def("step", &Zero::step, py::arg("optimizer"), Release())
      .def("clip_grad_norm_", &Zero::clip_grad_norm, py::arg("max_norm"), Release())
      .def("zero_grad", &Zero::zero_grad)
      .def_property_readonly("stage", &Zero::stage)
      .def("full_state_dict", [](Zero& z) {
        nn::StateDict state;
        {
          py::gil_scoped_release release;
          state = z.full_state_dict();
        }
        return to_ordered_dict(state);
      }, "The whole model under its own names, on every rank (collective)")
      .def("load_full_state_dict", [](Zero& z, const py::dict& state) {
        nn::StateDict converted = state_dict_from(state);
        py::gil_scoped_release release;
        z.load_full_state_dict(converted);
      })
      .def("memory", [](const Zero& z, const optim::Optimizer* optimizer) {
        auto mem = z.memory(optimizer);
        py::dict out;
        out["parameters"] = mem.parameters;
        out["gradients"] = mem.gradients;
        out["optimizer_state"] = mem.optimizer_state;
        out["total"] = mem.total();
        return out;
      }, py::arg("optimizer") = nullptr, "Bytes of training state this rank holds now");
}

}  // namespace tessera::python
