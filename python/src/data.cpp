// tessera.data: datasets (tensors, Fashion-MNIST, a Python map-style dataset with __getitem__ and
// __len__), the samplers (sequential, random, distributed with set_epoch) and DataLoader, an
// iterator over (inputs, targets) batches assembled ahead by the C++ loader's thread.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "tessera/data/clip_text.h"
#include "tessera/data/csv.h"
#include "tessera/data/csv_stream.h"
#include "tessera/train/local_strategy.h"
#include "tessera/data/image_folder.h"
#include "tessera/data/data_loader.h"
#include "tessera/data/dataset.h"
#include "tessera/data/sampler.h"
#include "tessera/ops/ops.h"

namespace tessera::python {
namespace {

Tensor as_tensor(const py::handle& value, const char* what, int64_t index) {
  if (py::isinstance<Tensor>(value)) return value.cast<Tensor>();
  if (py::isinstance<py::int_>(value)) return from_vector(std::vector<int64_t>{value.cast<int64_t>()}, {});
  if (py::isinstance<py::float_>(value)) return from_vector(std::vector<float>{value.cast<float>()}, {});
  py::object tensor = py::module_::import("tessera").attr("tensor")(value);
  if (!py::isinstance<Tensor>(tensor))
    throw ValueError(std::string("[Dataset] item ") + std::to_string(index) + "'s " + what + " is not a tensor, number or array");
  return tensor.cast<Tensor>();
}

// A dataset written in Python (PyTorch's map-style Dataset): len(ds) samples, ds[i] = (input, target).
// The loader's thread calls get_batch: it takes the GIL for the __getitem__ calls only.
class PyDataset : public data::Dataset {
 public:
  explicit PyDataset(py::object dataset) : dataset_(std::move(dataset)) {
    size_ = py::len(dataset_);
  }
  ~PyDataset() override {
    py::gil_scoped_acquire gil;
    dataset_ = py::object();
  }
  int64_t size() const override { return size_; }
  data::Batch get_batch(const std::vector<int64_t>& indices) const override {
    std::vector<Tensor> inputs, targets;
    {
      py::gil_scoped_acquire gil;
      for (int64_t i : indices) {
        py::object item = dataset_[py::int_(i)];
        auto pair = item.cast<py::tuple>();
        TESSERA_CHECK(pair.size() == 2, "[Dataset] item ", i, " is a tuple of ", pair.size(), ", not (input, target)");
        inputs.push_back(as_tensor(pair[0], "input", i));
        targets.push_back(as_tensor(pair[1], "target", i));
      }
    }
    return {stack(inputs, 0), stack(targets, 0)};
  }

 private:
  py::object dataset_;
  int64_t size_;
};

std::shared_ptr<const data::Dataset> dataset_from(const py::object& dataset) {
  if (py::isinstance<data::Dataset>(dataset)) return dataset.cast<std::shared_ptr<data::Dataset>>();
  TESSERA_CHECK(py::hasattr(dataset, "__getitem__") && py::hasattr(dataset, "__len__"),
                "[DataLoader] the dataset must be a tessera dataset or define __getitem__ and __len__");
  return std::make_shared<PyDataset>(dataset);
}

// The Python DataLoader: iterating starts an epoch (the sampler's set_epoch value when it has one,
// else a count of the iterations so far, so that shuffle=True reshuffles every epoch as PyTorch does).
class Loader {
 public:
  Loader(py::object dataset, int64_t batch_size, bool shuffle, py::object sampler, bool drop_last, uint64_t seed,
         int prefetch, double timeout_s)
      : dataset_(dataset_from(dataset)) {
    TESSERA_CHECK(batch_size > 0, "[DataLoader] batch_size must be positive, got ", batch_size);
    TESSERA_CHECK(!(shuffle && !sampler.is_none()), "[DataLoader] shuffle=True and a sampler are mutually exclusive");
    if (!sampler.is_none()) {
      sampler_object_ = sampler;
      sampler_ = sampler.cast<std::shared_ptr<data::Sampler>>();
    } else if (shuffle) {
      sampler_ = std::make_shared<data::RandomSampler>(dataset_->size(), seed);
    } else {
      sampler_ = std::make_shared<data::SequentialSampler>(dataset_->size());
    }
    data::DataLoaderOptions options;
    options.batch_size = batch_size;
    options.drop_last = drop_last;
    options.prefetch = prefetch;
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    loader_ = std::make_unique<data::DataLoader>(dataset_, sampler_, options);
  }
  ~Loader() {
    // The loader's thread may be waiting for the GIL (a Python dataset): let it finish first.
    py::gil_scoped_release release;
    loader_.reset();
  }
  void begin() {
    int64_t epoch = iterations_++;
    if (sampler_object_ && py::hasattr(sampler_object_, "_epoch")) epoch = sampler_object_.attr("_epoch").cast<int64_t>();
    py::gil_scoped_release release;
    loader_->start_epoch(epoch);
  }
  py::tuple next() {
    std::optional<data::Batch> batch;
    {
      py::gil_scoped_release release;
      batch = loader_->next();
    }
    if (!batch) throw py::stop_iteration();
    return py::make_tuple(batch->inputs, batch->targets);
  }
  int64_t size() const { return loader_->batches_per_epoch(); }

 private:
  std::shared_ptr<const data::Dataset> dataset_;
  std::shared_ptr<const data::Sampler> sampler_;
  py::object sampler_object_;
  std::unique_ptr<data::DataLoader> loader_;
  int64_t iterations_ = 0;
};

}  // namespace

void bind_data(py::module_& m) {
  py::class_<data::Dataset, std::shared_ptr<data::Dataset>>(m, "_NativeDataset")
      .def("__len__", &data::Dataset::size)
      .def("__getitem__", [](const data::Dataset& d, int64_t i) {
        if (i < 0) i += d.size();
        if (i < 0 || i >= d.size()) throw py::index_error("[Dataset] index " + std::to_string(i) + " out of range");
        data::Batch b = d.get_batch({i});
        return py::make_tuple(b.inputs.squeeze(0), b.targets.squeeze(0));
      });
  py::class_<data::TensorDataset, data::Dataset, std::shared_ptr<data::TensorDataset>>(m, "TensorDataset")
      .def(py::init<Tensor, Tensor>(), py::arg("inputs"), py::arg("targets"))
      .def_property_readonly("inputs", &data::TensorDataset::inputs)
      .def_property_readonly("targets", &data::TensorDataset::targets);
  m.def("FashionMNIST", [](const std::string& root, bool train) { return data::load_fashion_mnist(root, train ? "train" : "test"); },
        py::arg("root") = "/usr/share/datasets/fashion-mnist", py::arg("train") = true,
        "Fashion-MNIST (Debian's dataset-fashion-mnist): images (N, 1, 28, 28) normalised, labels int64");
  m.def("synthetic_classification", &data::make_synthetic_classification, py::arg("n"), py::arg("sample_shape"),
        py::arg("classes"), py::arg("seed"), py::arg("stream") = 0);

  py::class_<data::ClipTextDataset, data::Dataset, std::shared_ptr<data::ClipTextDataset>>(m, "ClipTextDataset")
      .def_property_readonly("features", &data::ClipTextDataset::features)
      .def("aligned_narrations", &data::ClipTextDataset::aligned_narrations);
  m.def("load_clip_text", &data::load_clip_text, py::arg("dir"),
        "Clip features (safetensors shards) and narrations (JSONL): inputs (B, T, F), targets (B, K, L)");
  m.def("write_synthetic_clip_text", [](const std::string& dir, int64_t clips, uint64_t seed, uint64_t stream) {
          data::SyntheticClipTextOptions o;
          o.clips = clips, o.seed = seed, o.stream = stream;
          data::write_synthetic_clip_text(dir, o);
        }, py::arg("dir"), py::arg("clips") = 4000, py::arg("seed") = 0, py::arg("stream") = 0);

  m.def("load_csv", [](const py::object& paths, const std::string& label, bool header, const std::string& delimiter,
                       bool regression) {
          std::vector<std::string> files = py::isinstance<py::str>(paths) ? data::csv_files(paths.cast<std::string>())
                                                                          : paths.cast<std::vector<std::string>>();
          TESSERA_CHECK(delimiter.size() == 1, "[load_csv] the delimiter must be one character, got '", delimiter, "'");
          data::CsvOptions o;
          o.label = label, o.header = header, o.delimiter = delimiter[0], o.regression = regression;
          data::CsvTable t = data::load_csv(files, o);
          return py::make_tuple(t.data, t.feature_columns);
        }, py::arg("paths"), py::arg("label") = "label", py::arg("header") = true, py::arg("delimiter") = ",",
        py::arg("regression") = false,
        "A CSV file, a directory of *.csv partitions or a list of files as (TensorDataset, feature names)");
  py::class_<data::ImageFolderDataset, data::Dataset, std::shared_ptr<data::ImageFolderDataset>>(m, "ImageFolder")
      .def(py::init([](const std::string& root, int64_t channels) { return data::load_image_folder(root, {channels}); }),
           py::arg("root"), py::arg("channels") = 0,
           "ROOT/<class>/*.png, classes in folder-name order, decoded per batch: (C, H, W) in [0, 1]")
      .def_property_readonly("classes", &data::ImageFolderDataset::classes);
  py::class_<data::StreamingCsv, data::Dataset, std::shared_ptr<data::StreamingCsv>>(m, "StreamingCsv")
      .def(py::init([](const py::object& paths, const std::string& label, bool header, const std::string& delimiter,
                       bool regression, int64_t classes, const py::object& rank, const py::object& world) {
             std::vector<std::string> files = py::isinstance<py::str>(paths) ? data::csv_files(paths.cast<std::string>())
                                                                             : paths.cast<std::vector<std::string>>();
             TESSERA_CHECK(delimiter.size() == 1, "[StreamingCsv] the delimiter must be one character, got '",
                           delimiter, "'");
             data::CsvOptions o;
             o.label = label, o.header = header, o.delimiter = delimiter[0], o.regression = regression;
             auto table = std::make_shared<data::StreamingCsv>(files, o, classes);
             auto group = default_group_or_null();
             const int n = world.is_none() ? (group ? group->size() : 1) : world.cast<int>();
             const int r = rank.is_none() ? (group ? group->rank() : 0) : rank.cast<int>();
             table->select_share(r, n);
             return table;
           }),
           py::arg("paths"), py::arg("label") = "label", py::arg("header") = true, py::arg("delimiter") = ",",
           py::arg("regression") = false, py::arg("classes") = 0, py::arg("rank") = py::none(),
           py::arg("world") = py::none(),
           "A CSV table read where it lies: this rank's byte range of it (rank and world from the process group),"
           " every row checked, batches read from disk")
      .def_property_readonly("feature_columns", &data::StreamingCsv::feature_columns)
      .def_property_readonly("table_bytes", &data::StreamingCsv::table_bytes);
  m.def("csv_partition_of", &data::csv_partition_of, py::arg("paths"), py::arg("rank"), py::arg("world"));
  m.def("csv_files", &data::csv_files, py::arg("file_or_directory"));

  py::class_<data::Sampler, std::shared_ptr<data::Sampler>>(m, "Sampler", py::dynamic_attr())
      .def("__len__", &data::Sampler::size)
      .def("indices", &data::Sampler::indices, py::arg("epoch") = 0)
      .def("set_epoch", [](py::object self, int64_t epoch) { self.attr("_epoch") = epoch; }, py::arg("epoch"));
  py::class_<data::SequentialSampler, data::Sampler, std::shared_ptr<data::SequentialSampler>>(m, "SequentialSampler")
      .def(py::init([](const py::object& ds) { return std::make_shared<data::SequentialSampler>(py::len(ds)); }), py::arg("data_source"));
  py::class_<data::RandomSampler, data::Sampler, std::shared_ptr<data::RandomSampler>>(m, "RandomSampler")
      .def(py::init([](const py::object& ds, uint64_t seed) { return std::make_shared<data::RandomSampler>(py::len(ds), seed); }),
           py::arg("data_source"), py::arg("seed") = 0);
  py::class_<data::DistributedSampler, data::Sampler, std::shared_ptr<data::DistributedSampler>>(m, "DistributedSampler")
      .def(py::init([](const py::object& ds, const py::object& replicas, const py::object& rank, bool shuffle, uint64_t seed,
                       bool drop_last) {
             auto group = default_group_or_null();
             TESSERA_CHECK(group || (!replicas.is_none() && !rank.is_none()),
                           "[DistributedSampler] no process group: call tessera.distributed.init_process_group() "
                           "first, or pass num_replicas and rank");
             int n = replicas.is_none() ? group->size() : replicas.cast<int>();
             int r = rank.is_none() ? group->rank() : rank.cast<int>();
             return std::make_shared<data::DistributedSampler>(py::len(ds), r, n, shuffle, seed, drop_last);
           }),
           py::arg("dataset"), py::arg("num_replicas") = py::none(), py::arg("rank") = py::none(), py::arg("shuffle") = true,
           py::arg("seed") = 0, py::arg("drop_last") = false);

  py::class_<data::PaddedRandomSampler, data::Sampler, std::shared_ptr<data::PaddedRandomSampler>>(m, "PaddedRandomSampler")
      .def(py::init([](const py::object& ds, const py::object& per_replica, uint64_t seed) {
             const auto n = static_cast<int64_t>(py::len(ds));
             int64_t largest = n;
             if (per_replica.is_none()) {
               if (auto group = default_group_or_null()) largest = train::max_over_job(*group, n);
             } else {
               largest = per_replica.cast<int64_t>();
             }
             return std::make_shared<data::PaddedRandomSampler>(n, largest, seed);
           }),
           py::arg("dataset"), py::arg("per_replica") = py::none(), py::arg("seed") = 0,
           "This rank's own rows (a StreamingCsv share) in a fresh order each epoch, padded to the largest share "
           "of the process group (or per_replica)");

  py::class_<Loader>(m, "DataLoader")
      .def(py::init<py::object, int64_t, bool, py::object, bool, uint64_t, int, double>(), py::arg("dataset"),
           py::arg("batch_size") = 1, py::arg("shuffle") = false, py::arg("sampler") = py::none(),
           py::arg("drop_last") = false, py::arg("seed") = 0, py::arg("prefetch") = 2, py::arg("timeout") = 120.0)
      .def("__len__", &Loader::size)
      .def("__iter__", [](py::object self) {
        self.cast<Loader&>().begin();
        return self;
      })
      .def("__next__", &Loader::next);
}

}  // namespace tessera::python
