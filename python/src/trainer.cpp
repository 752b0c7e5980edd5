// The generic Trainer and its data: TensorDataset from NumPy arrays, .npy or safetensors files,
// metrics (built-in or Python functions), callbacks receiving TrainEvents, and fit() running
// without the GIL (taken back only to call into Python).
#include <meganeura/distributed.h>
#include <meganeura/trainer.h>

#include <cstring>

#include "bindings.h"

namespace mn::python {

namespace {

// A NumPy array (or anything np.asarray takes) as a column: float32, float16, int32 and uint32
// arrays are copied as they are, other numbers converted as TensorDataset's files are (float64
// to f32, other integers to i32 or u32 after a range check).
Column column_of(const py::handle& value, const std::string& where) {
  const auto np = py::module_::import("numpy");
  py::array a = np.attr("ascontiguousarray")(value);
  if (a.ndim() < 1) throw ShapeError(where + ": a column needs a sample dimension first");
  const std::string name = py::str(a.dtype().attr("name")).cast<std::string>();
  std::optional<DType> same;
  if (name == "float32") same = DType::f32;
  if (name == "float16") same = DType::f16;
  if (name == "int32") same = DType::i32;
  if (name == "uint32") same = DType::u32;
  if (!same) {
    const char kind = a.dtype().kind();
    std::optional<DType> target;
    if (kind == 'u' || kind == 'b') target = DType::u32;
    if (kind == 'i') target = DType::i32;
    return Column::from_array(to_array(a, target, where), std::nullopt, where);
  }
  Column c;
  c.dtype = *same;
  c.shape.assign(a.shape(), a.shape() + a.ndim());
  c.bytes.resize(static_cast<size_t>(a.nbytes()));
  std::memcpy(c.bytes.data(), a.data(), c.bytes.size());
  return c;
}

py::array column_array(const Column& c) {
  if (c.dtype == DType::f16 || c.dtype == DType::bf16) return to_numpy(c.to_array());
  std::vector<py::ssize_t> dims(c.shape.begin(), c.shape.end());
  py::array out(numpy_dtype(c.dtype), dims);
  std::memcpy(out.mutable_data(), c.bytes.data(), c.bytes.size());
  return out;
}

py::dict event_metrics(const std::map<std::string, double>& m) {
  py::dict out;
  for (const auto& [name, value] : m) out[py::str(name)] = value;
  return out;
}

// A Python metric: fn(rows, batch_size, outputs, columns) -> (sum, weight).
Metric python_metric(const std::string& name, std::vector<std::string> outputs,
                     py::function fn) {
  Metric m;
  m.name = name;
  m.outputs = std::move(outputs);
  auto shared = std::make_shared<py::function>(std::move(fn));
  m.measure = [shared](const MetricInput& in) -> std::pair<double, double> {
    py::gil_scoped_acquire gil;
    py::dict outputs, columns;
    for (const auto& [n, a] : in.outputs) outputs[py::str(n)] = to_numpy(a);
    for (const auto& [n, c] : in.batch.columns) columns[py::str(n)] = column_array(c);
    return (*shared)(in.batch.rows, in.batch_size, outputs, columns)
        .cast<std::pair<double, double>>();
  };
  return m;
}

TrainerOptions::Progress progress_of(const std::string& s) {
  if (s == "auto") return TrainerOptions::Progress::automatic;
  if (s == "bar") return TrainerOptions::Progress::bar;
  if (s == "json") return TrainerOptions::Progress::json;
  if (s == "none") return TrainerOptions::Progress::none;
  throw Error("Trainer: progress='" + s + "', expected 'auto', 'bar', 'json' or 'none'");
}

void bind_dataset(py::module_& data) {
  py::class_<TensorDataset, std::shared_ptr<TensorDataset>>(
      data, "TensorDataset",
      "Named columns of samples (the first dimension of every array), fed to a graph's inputs "
      "of the same names by the Trainer.")
      .def(py::init([](const py::dict& columns) {
             auto d = std::make_shared<TensorDataset>();
             for (auto [key, value] : columns) {
               const auto name = key.cast<std::string>();
               d->add(name, column_of(value, "TensorDataset column '" + name + "'"));
             }
             return d;
           }),
           py::arg("columns") = py::dict(), "From a dict of column name -> array.")
      .def_static(
          "from_npy",
          [](const std::map<std::string, std::filesystem::path>& files) {
            return std::make_shared<TensorDataset>(TensorDataset::from_npy(files));
          },
          py::arg("files"), "Each .npy file (dict of column name -> path) a column.")
      .def_static(
          "from_safetensors",
          [](const std::filesystem::path& path, const std::vector<std::string>& names) {
            return std::make_shared<TensorDataset>(TensorDataset::from_safetensors(path, names));
          },
          py::arg("path"), py::arg("names") = std::vector<std::string>{},
          "The named tensors of a safetensors file (all when `names` is empty), each a column.")
      .def(
          "add",
          [](TensorDataset& d, const std::string& name, const py::object& value) {
            d.add(name, column_of(value, "TensorDataset column '" + name + "'"));
          },
          py::arg("name"), py::arg("values"))
      .def("__len__", &TensorDataset::size)
      .def_property_readonly("names", &TensorDataset::names)
      .def(
          "column", [](const TensorDataset& d, const std::string& name) {
            return column_array(d.column(name));
          },
          py::arg("name"))
      .def(
          "slice",
          [](const TensorDataset& d, int64_t begin, int64_t count) {
            return std::make_shared<TensorDataset>(d.slice(begin, count));
          },
          py::arg("begin"), py::arg("count"));
  data.def(
      "load_npy",
      [](const std::filesystem::path& path) {
        return column_array(Column::from_raw(read_npy(path), path.string()));
      },
      py::arg("path"), "A .npy file as the column the Trainer would make of it.");
}

void bind_metric(py::module_& m) {
  py::class_<Metric>(m, "Metric",
                     "Sums (value, weight) over the batches of an epoch or an evaluation and "
                     "reports value / weight.")
      .def(py::init(&python_metric), py::arg("name"), py::arg("outputs"), py::arg("fn"),
           "fn(rows, batch_size, outputs, columns) -> (sum, weight): `outputs` the graph outputs "
           "named, `columns` the batch's data (its first `rows` rows are samples).")
      .def_readonly("name", &Metric::name)
      .def_readonly("outputs", &Metric::outputs)
      .def_static("mean", &Metric::mean, py::arg("output"), py::arg("name") = "",
                  "An output's mean: a scalar weighted by the batch's samples, or [batch, ...] "
                  "over the real rows.")
      .def_static("accuracy", &Metric::accuracy, py::arg("logits"), py::arg("labels"),
                  py::arg("name") = "accuracy",
                  "The share of samples whose largest logit is at their label (a column).");
}

void bind_events(py::module_& m) {
  py::class_<TrainEvent>(m, "TrainEvent",
                         "What a callback sees; setting `stop` ends the run after this event.")
      .def_property_readonly("kind", [](const TrainEvent& e) { return train_event_name(e.kind); })
      .def_readonly("epoch", &TrainEvent::epoch)
      .def_readonly("epochs", &TrainEvent::epochs)
      .def_readonly("step", &TrainEvent::step)
      .def_readonly("steps_per_epoch", &TrainEvent::steps_per_epoch)
      .def_readonly("global_step", &TrainEvent::global_step)
      .def_readonly("total_steps", &TrainEvent::total_steps)
      .def_readonly("lr", &TrainEvent::lr)
      .def_readonly("loss", &TrainEvent::loss)
      .def_property_readonly("metrics", [](const TrainEvent& e) { return event_metrics(e.metrics); })
      .def_property_readonly("eval_metrics",
                             [](const TrainEvent& e) { return event_metrics(e.eval_metrics); })
      .def_readonly("seconds", &TrainEvent::seconds)
      .def_readonly("samples_per_second", &TrainEvent::samples_per_second)
      .def_readonly("eta_seconds", &TrainEvent::eta_seconds)
      .def_readwrite("stop", &TrainEvent::stop);
  py::class_<TrainHistory::Epoch>(m, "TrainEpoch")
      .def_readonly("epoch", &TrainHistory::Epoch::epoch)
      .def_readonly("metrics", &TrainHistory::Epoch::metrics)
      .def_readonly("eval_metrics", &TrainHistory::Epoch::eval_metrics);
  py::class_<TrainHistory>(m, "TrainHistory")
      .def_readonly("epochs", &TrainHistory::epochs)
      .def_readonly("eval_metrics", &TrainHistory::eval_metrics)
      .def_readonly("steps", &TrainHistory::steps)
      .def_readonly("seconds", &TrainHistory::seconds)
      .def_readonly("samples_per_second", &TrainHistory::samples_per_second)
      .def_readonly("stopped", &TrainHistory::stopped);
}

// A Python callback, called with the GIL (fit() runs without it).
TrainCallback python_callback(py::function fn) {
  auto shared = std::make_shared<py::function>(std::move(fn));
  return [shared](TrainEvent& e) {
    py::gil_scoped_acquire gil;
    (*shared)(py::cast(&e, py::return_value_policy::reference));
  };
}

}  // namespace

void bind_trainer(py::module_& m, py::module_& data) {
  bind_dataset(data);
  bind_metric(m);
  bind_events(m);
  py::class_<Trainer>(m, "Trainer",
                      "Trains a graph with a scalar loss on TensorDatasets: one submission per "
                      "step, metrics, evaluation, callbacks, checkpoints with exact resume.")
      .def(py::init([](const Tensor& loss, const Optimizer& optimizer, int64_t epochs,
                       int64_t max_steps, bool shuffle, uint64_t seed, bool drop_last,
                       const std::map<std::string, double>& pad_values,
                       const std::vector<Metric>& metrics, const std::vector<Metric>& eval_metrics,
                       const Graph* eval_graph, int64_t eval_every,
                       const std::filesystem::path& checkpoint, int64_t checkpoint_every,
                       const std::filesystem::path& resume,
                       const std::map<std::string, std::string>& run_identity,
                       const std::string& progress, int64_t log_every,
                       const std::vector<py::function>& callbacks, const std::string& device,
                       const py::object& precision, std::shared_ptr<Communicator> communicator,
                       bool check_ranks) {
             TrainerOptions o;
             o.optimizer = optimizer;
             o.epochs = epochs;
             o.max_steps = max_steps;
             o.shuffle = shuffle;
             o.seed = seed;
             o.drop_last = drop_last;
             o.pad_values = pad_values;
             o.metrics = metrics;
             o.eval_metrics = eval_metrics;
             o.eval_every = eval_every;
             o.checkpoint = checkpoint;
             o.checkpoint_every = checkpoint_every;
             o.resume = resume;
             o.run_identity = run_identity;
             o.progress = progress_of(progress);
             o.log_every = log_every;
             for (const py::function& f : callbacks) o.callbacks.push_back(python_callback(f));
             o.session.device = device;
             o.session.precision = to_dtype(precision, "Trainer precision");
             o.communicator = std::move(communicator);
             o.check_ranks = check_ranks;
             return std::make_unique<Trainer>(loss, std::move(o), eval_graph);
           }),
           py::arg("loss"), py::kw_only(), py::arg("optimizer"), py::arg("epochs") = 1,
           py::arg("max_steps") = -1, py::arg("shuffle") = true, py::arg("seed") = 0,
           py::arg("drop_last") = false,
           py::arg("pad_values") = std::map<std::string, double>{},
           py::arg("metrics") = std::vector<Metric>{},
           py::arg("eval_metrics") = std::vector<Metric>{}, py::arg("eval_graph") = nullptr,
           py::arg("eval_every") = 0, py::arg("checkpoint") = "", py::arg("checkpoint_every") = 0,
           py::arg("resume") = "", py::arg("run_identity") = std::map<std::string, std::string>{},
           py::arg("progress") = "auto", py::arg("log_every") = 100,
           py::arg("callbacks") = std::vector<py::function>{}, py::arg("device") = "",
           py::arg("precision") = DType::f32, py::arg("communicator") = nullptr,
           py::arg("check_ranks") = false,
           py::keep_alive<1, 2>(), py::keep_alive<1, 12>(),
           "`loss`: a one-element tensor of a graph whose inputs are data columns; the graph "
           "gets the backward pass and the update. `eval_graph`: a graph over the same "
           "parameters for evaluation (modules in eval mode); without one, a copy of the loss's "
           "graph before the update. `communicator` (meganeura.distributed.connect()): train "
           "data-parallel, each process on its share of every batch (the batch of `loss` is "
           "one process's share); rank 0 prints and checkpoints. `check_ranks`: after every update, "
           "compare the ranks' parameters by checksum (DistributedError naming those that "
           "differ).")
      .def(
          "fit",
          [](Trainer& t, std::shared_ptr<const TensorDataset> train,
             std::shared_ptr<const TensorDataset> eval) {
            py::gil_scoped_release release;
            return t.fit(std::move(train), std::move(eval));
          },
          py::arg("train"), py::arg("eval") = nullptr,
          "Trains for the epochs (evaluating on `eval` when given); returns a TrainHistory.")
      .def(
          "evaluate",
          [](Trainer& t, const TensorDataset& data) {
            py::gil_scoped_release release;
            return t.evaluate(data);
          },
          py::arg("data"), "'loss' and the eval metrics over every sample of `data`.")
      .def_property_readonly("session", &Trainer::session, py::return_value_policy::reference_internal)
      .def_property_readonly("global_step", &Trainer::global_step);
}

}  // namespace mn::python
