// The Trainer: any graph with a loss, fed from named columns, in a session of two programs
// ("train": forward, backward and update; "eval": the evaluation graph over the same weights),
// or, data-parallel, three: "train" ends at the gradients, which the ranks average before
// "update" applies them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <meganeura/error.h>
#include <meganeura/trainer.h>

#include "data/atomic_file.h"
#include "ir/graph_rewrite.h"
#include "ir/quoted_list.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/progress.h"

namespace mn {

namespace {

using Clock = std::chrono::steady_clock;

const char* const kStepInputs[] = {StepInputs::lr, StepInputs::step, StepInputs::apply,
                                   StepInputs::bias_correction1, StepInputs::bias_correction2};

bool is_step_input(const std::string& name) {
  return std::any_of(std::begin(kStepInputs), std::end(kStepInputs),
                     [&](const char* s) { return name == s; });
}

[[noreturn]] void fail(const std::string& what) { throw Error("Trainer: " + what); }

void check_options(const TrainerOptions& o) {
  auto out_of_range = [](const std::string& field, int64_t value, const std::string& want) {
    fail("TrainerOptions::" + field + " is " + std::to_string(value) + ", expected " + want);
  };
  if (o.epochs < 1) out_of_range("epochs", o.epochs, ">= 1");
  if (o.max_steps < -1 || o.max_steps == 0) out_of_range("max_steps", o.max_steps, "-1 or >= 1");
  if (o.eval_every < 0) out_of_range("eval_every", o.eval_every, ">= 0");
  if (o.checkpoint_every < 0) out_of_range("checkpoint_every", o.checkpoint_every, ">= 0");
  if (o.log_every < 1) out_of_range("log_every", o.log_every, ">= 1");
  o.optimizer.validate("Trainer");
  // PyTorch accepts 0; a whole run at 0 trains nothing, which is never what was meant here.
  if (o.optimizer.lr == 0) fail("Optimizer::lr is 0, expected a positive number (nothing would train)");
  for (const auto* list : {&o.metrics, &o.eval_metrics}) {
    std::set<std::string> seen = {"loss"};
    for (const Metric& m : *list) {
      if (m.name.empty() || !m.measure) fail("a metric needs a name and a measure");
      if (!seen.insert(m.name).second) fail("two metrics are named '" + m.name + "'");
    }
  }
  for (const auto& [column, value] : o.pad_values) {
    if (!std::isfinite(value)) fail("pad value of column '" + column + "' is not finite");
  }
}

// The graph inputs fed from data columns: every input but the step scalars, all with the same
// first dimension (the batch size, returned).
int64_t feed_inputs(const Graph& g, const char* program, std::vector<std::string>& feeds) {
  int64_t batch = -1;
  std::string first;
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    if (is_step_input(n.name)) continue;
    if (n.type.rank() == 0) {
      fail(std::string(program) + " graph input '" + n.name +
           "' is a scalar; inputs fed from data columns have a batch dimension first");
    }
    if (batch >= 0 && n.type.shape[0] != batch) {
      fail(std::string(program) + " graph inputs '" + first + "' and '" + n.name +
           "' disagree on the batch size (" + std::to_string(batch) + " and " +
           std::to_string(n.type.shape[0]) + ")");
    }
    if (batch < 0) first = n.name;
    batch = n.type.shape[0];
    feeds.push_back(n.name);
  }
  if (batch < 0) fail(std::string(program) + " graph has no input to feed data to");
  return batch;
}

// Why a training graph cannot also serve as its own evaluation graph, or "".
std::string train_only_reason(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.op_name() == "dropout") return "it has dropout";
  }
  if (!g.assignments().empty()) {
    return "it updates state '" + g.node(g.assignments().front().first).name + "'";
  }
  return "";
}

// "loss" (its mean over the samples, always measured) and the metrics asked for.
std::vector<Metric> with_loss(const std::vector<Metric>& metrics) {
  std::vector<Metric> out = {Metric::mean("loss")};
  out.insert(out.end(), metrics.begin(), metrics.end());
  return out;
}

std::vector<std::string> metric_outputs(const std::vector<Metric>& metrics) {
  std::vector<std::string> out = {"loss"};
  for (const Metric& m : metrics) {
    for (const std::string& o : m.outputs) {
      if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
    }
  }
  return out;
}

void check_outputs(const Graph& g, const char* program, const std::vector<std::string>& outputs) {
  for (const std::string& o : outputs) {
    if (g.find_output(o)) continue;
    std::vector<std::string> have;
    for (const auto& [name, id] : g.outputs()) have.push_back(name);
    fail("a metric reads output '" + o + "', which the " + program + " graph does not have (has: " +
         quoted_list(have) + ")");
  }
}

// Sums of one set of metrics over an epoch or an evaluation.
struct MetricSums {
  std::map<std::string, std::pair<double, double>> sums;

  void add(const std::string& name, std::pair<double, double> v) {
    auto& s = sums[name];
    s.first += v.first;
    s.second += v.second;
  }
  void add(const MetricSums& other) {
    for (const auto& [name, v] : other.sums) add(name, v);
  }
  std::map<std::string, double> means() const {
    std::map<std::string, double> out;
    for (const auto& [name, s] : sums) {
      out[name] = s.second > 0 ? s.first / s.second : std::numeric_limits<double>::quiet_NaN();
    }
    return out;
  }
  // In checkpoint metadata (exact: %.17g), so a resumed epoch reports what an unbroken one would.
  void save(train::Meta& meta) const {
    for (const auto& [name, s] : sums) {
      meta["epoch_metric/" + name] = fmt::format("{:.17g} {:.17g}", s.first, s.second);
    }
  }
  void load(const train::Meta& meta, const std::filesystem::path& file) {
    const std::string prefix = "epoch_metric/";
    for (const auto& [key, value] : meta) {
      if (key.rfind(prefix, 0) != 0) continue;
      double sum = 0, weight = 0;
      char rest = 0;
      if (std::sscanf(value.c_str(), "%lf %lf %c", &sum, &weight, &rest) != 2) {
        throw FormatError("cannot resume from '" + file.string() + "': metadata '" + key +
                          "' is '" + value + "', expected two numbers");
      }
      sums[key.substr(prefix.size())] = {sum, weight};
    }
  }
};

}  // namespace

struct Trainer::Impl {
  TrainerOptions o;
  Graph eval_copy;  // the evaluation graph when none was given
  int64_t train_batch = 0, eval_batch = 0;
  std::vector<std::string> train_feeds, eval_feeds;
  std::map<std::string, TensorType> train_types, eval_types;
  std::vector<std::string> train_outputs, eval_outputs;
  std::unique_ptr<Session> session;
  int64_t global_step = 0;
  bool resumed = false;
  std::unique_ptr<train::ProgressPrinter> printer;
  // Data-parallel: the ranks, the update's graph, and the tensors checkpoints leave out.
  std::shared_ptr<Communicator> comm;
  SplitTrainingStep split;
  std::set<std::string> transient;

  int rank() const { return comm ? comm->rank() : 0; }
  int ranks() const { return comm ? comm->size() : 1; }
  // The rows of one step of the data: every rank's batch together.
  int64_t data_batch() const { return train_batch * ranks(); }

  void check_data(const TensorDataset& d, const char* program,
                  const std::vector<std::string>& feeds,
                  const std::map<std::string, TensorType>& types) const {
    if (d.size() < 1) fail(std::string("the ") + program + " data set is empty");
    for (const std::string& name : feeds) {
      if (!d.contains(name)) {
        fail(std::string(program) + " graph input '" + name + "' has no column in the data (has: " +
             quoted_list(d.names()) + ")");
      }
      const Column& c = d.column(name);
      const TensorType& t = types.at(name);
      const Shape sample(t.shape.begin() + 1, t.shape.end());
      if (c.sample_shape() != sample) {
        throw ShapeError("Trainer: column '" + name + "' holds samples of shape " +
                         shape_str(c.sample_shape()) + ", " + program + " graph input '" + name +
                         "' " + t.str() + " takes " + shape_str(sample));
      }
      const bool same_kind = is_float(c.dtype) ? is_float(t.dtype) : c.dtype == t.dtype;
      if (!same_kind) {
        fail("column '" + name + "' holds " + dtype_name(c.dtype) + " values, " + program +
             " graph input '" + name + "' is " + dtype_name(t.dtype) +
             ": convert the column (TensorDataset::add with a dtype)");
      }
    }
  }

  // Sets the program's inputs from a batch, padding a short one to the graph's batch size.
  void feed(const char* program, const TensorBatch& b, const std::vector<std::string>& feeds,
            int64_t batch) {
    for (const std::string& name : feeds) {
      const Column& c = b.columns.at(name);
      if (b.rows == batch) {
        session->set_raw(program, name, c.dtype, c.bytes);
        continue;
      }
      auto pad = o.pad_values.find(name);
      const double value = pad == o.pad_values.end() ? 0.0 : pad->second;
      const Column pad_row = Column::from_array(Array::full({1}, value, c.dtype), std::nullopt,
                                                "pad value of column '" + name + "'");
      std::vector<std::byte> bytes(c.row_bytes() * static_cast<size_t>(batch));
      std::memcpy(bytes.data(), c.bytes.data(), c.bytes.size());
      const size_t w = dtype_size(c.dtype);
      for (size_t at = c.bytes.size(); at < bytes.size(); at += w) {
        std::memcpy(bytes.data() + at, pad_row.bytes.data(), w);
      }
      session->set_raw(program, name, c.dtype, bytes);
    }
  }

  std::map<std::string, Array> read_outputs(const char* program,
                                            const std::vector<std::string>& names) const {
    std::map<std::string, Array> out;
    for (const std::string& n : names) out[n] = session->get(program, n);
    return out;
  }

  void measure(MetricSums& sums, const std::vector<Metric>& metrics, const TensorBatch& b,
               int64_t batch, const std::map<std::string, Array>& outputs) const {
    const MetricInput in{b, batch, outputs, !o.pad_values.empty()};
    for (const Metric& m : metrics) sums.add(m.name, m.measure(in));
  }

  train::Meta identity() const {
    train::Meta id = o.run_identity;
    id["optimizer"] = optimizer_name(o.optimizer.kind);
    id["batch"] = std::to_string(data_batch());
    return id;
  }

  // Every sample of `data` (checked by check_data) through the eval program: "loss" and the
  // eval metrics.
  std::map<std::string, double> evaluate(const TensorDataset& data) {
    auto shared = std::shared_ptr<const TensorDataset>(&data, [](const TensorDataset*) {});
    TensorLoader loader(shared, {.batch_size = eval_batch, .shuffle = false, .prefetch = 1});
    const std::vector<Metric> metrics = with_loss(o.eval_metrics);
    MetricSums sums;
    for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
      const TensorBatch b = loader.next();
      feed("eval", b, eval_feeds, eval_batch);
      session->step("eval");
      measure(sums, metrics, b, eval_batch, read_outputs("eval", eval_outputs));
    }
    return sums.means();
  }

  // Data-parallel: one step's loss and metric sums as the ranks' (the loss their mean), the
  // same on every rank. One all-reduce of a few numbers.
  void reduce_step(MetricSums& step, double& loss) const {
    std::vector<double> v = {loss};
    for (const auto& [name, sum] : step.sums) {
      v.push_back(sum.first);
      v.push_back(sum.second);
    }
    comm->all_reduce_sum(v);
    loss = v[0] / ranks();
    size_t i = 1;
    for (auto& [name, sum] : step.sums) {
      sum.first = v[i++];
      sum.second = v[i++];
    }
  }

  // The callbacks and the progress see `e`; a callback's stop ends the run after this event.
  void emit(TrainEvent& e, bool& stop) {
    e.stop = false;
    for (const TrainCallback& cb : o.callbacks) cb(e);
    if (printer) printer->on_event(e);
    stop = stop || e.stop;
  }
};

Trainer::Trainer(Tensor loss, TrainerOptions options, const Graph* eval)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  check_options(options);
  m.o = std::move(options);
  if (!loss.valid()) fail("the loss is not a tensor of a graph");
  Graph& g = loss.graph();
  if (auto existing = g.find_output("loss"); existing && *existing != loss.id()) {
    fail("the graph has an output 'loss' that is not the loss being trained");
  }
  if (!g.find_output("loss")) g.output("loss", loss);
  if (!eval) {
    if (const std::string why = train_only_reason(g); !why.empty()) {
      fail("the training graph cannot also evaluate: " + why +
           "; pass an evaluation graph built with the modules in eval mode");
    }
    m.eval_copy = copy_graph(g);
    eval = &m.eval_copy;
  }
  m.comm = m.o.communicator;
  if (m.comm) {
    m.split = split_training_step(loss, m.o.optimizer);
    m.transient = train::transient_sums(m.split, m.o.optimizer);
  } else {
    add_training_step(loss, m.o.optimizer);
  }

  m.train_batch = feed_inputs(g, "training", m.train_feeds);
  m.eval_batch = feed_inputs(*eval, "evaluation", m.eval_feeds);
  for (const std::string& n : m.train_feeds) m.train_types[n] = g.node(*g.find_input(n)).type;
  for (const std::string& n : m.eval_feeds) m.eval_types[n] = eval->node(*eval->find_input(n)).type;
  if (!eval->find_output("loss")) fail("the evaluation graph has no output 'loss'");
  for (NodeId id : eval->parameters()) {
    const Node& n = eval->node(id);
    if (!g.find_persistent(n.name)) {
      fail("evaluation graph parameter '" + n.name + "' is not a parameter of the training graph");
    }
  }
  m.train_outputs = metric_outputs(m.o.metrics);
  m.eval_outputs = metric_outputs(m.o.eval_metrics);
  check_outputs(g, "training", m.train_outputs);
  check_outputs(*eval, "evaluation", m.eval_outputs);
  std::vector<SessionProgram> programs = {{"train", &g, m.train_outputs}};
  if (m.comm) programs.push_back({"update", m.split.update.get(), std::vector<std::string>{}});
  programs.push_back({"eval", eval, m.eval_outputs});
  SessionOptions so = m.o.session;
  if (m.comm) so.exportable_memory |= train::reduces_in_place(*m.comm);
  m.session = build_session(programs, so);
  if (m.o.progress != TrainerOptions::Progress::none && m.rank() == 0) {
    m.printer = std::make_unique<train::ProgressPrinter>(m.o.progress, m.o.progress_stream,
                                                         m.o.log_every);
  }
}

Trainer::~Trainer() = default;

Session& Trainer::session() { return *impl_->session; }
int64_t Trainer::global_step() const { return impl_->global_step; }
const TrainerOptions& Trainer::options() const { return impl_->o; }

std::map<std::string, double> Trainer::evaluate(const TensorDataset& data) {
  impl_->check_data(data, "evaluation", impl_->eval_feeds, impl_->eval_types);
  return impl_->evaluate(data);
}

TrainHistory Trainer::fit(std::shared_ptr<const TensorDataset> train,
                          std::shared_ptr<const TensorDataset> eval) {
  Impl& m = *impl_;
  const TrainerOptions& o = m.o;
  if (!train) fail("fit: no training data");
  m.check_data(*train, "training", m.train_feeds, m.train_types);
  if (eval) m.check_data(*eval, "evaluation", m.eval_feeds, m.eval_types);
  if (!o.checkpoint.empty()) data::AtomicFile::check_destination(o.checkpoint);

  const int64_t data_batch = m.data_batch();
  TensorLoader loader(train, {.batch_size = data_batch,
                              .shuffle = o.shuffle,
                              .seed = o.seed,
                              .drop_last = o.drop_last});
  const int64_t per_epoch = loader.batches_per_epoch();
  const int64_t short_rows = o.drop_last ? 0 : train->size() % data_batch;
  if (short_rows != 0 && o.pad_values.empty()) {
    fail(fmt::format(
        "the training data's last batch holds {} of the {} samples of a step: set drop_last, or "
        "pad_values to values that make padding rows count for nothing (e.g. -100 for the "
        "labels of cross_entropy)",
        short_rows, data_batch));
  }
  if (short_rows != 0 && short_rows <= (m.ranks() - 1) * m.train_batch) {
    fail(fmt::format(
        "the training data's last batch holds {} samples, which leaves rank {} of {} (batches "
        "of {}) without any: set drop_last, or change the batch or the number of ranks",
        short_rows, (short_rows + m.train_batch - 1) / m.train_batch, m.ranks(), m.train_batch));
  }
  if (o.epochs > std::numeric_limits<int64_t>::max() / per_epoch) {
    fail(std::to_string(o.epochs) + " epochs of " + std::to_string(per_epoch) +
         " steps overflow the step counter");
  }
  const int64_t total = per_epoch * o.epochs;
  const int64_t acc = o.optimizer.accumulate;
  if (acc > total) {
    fail("Optimizer::accumulate is " + std::to_string(acc) + " micro-batches per update, but the "
         "run has only " + std::to_string(total) + " batches: no update would ever happen");
  }

  MetricSums epoch_sums;
  if (!o.resume.empty() && !m.resumed) {
    const train::ResumePoint at = train::load_checkpoint(
        *m.session, {o.resume, m.identity(), per_epoch, total, o.epochs, m.transient});
    m.global_step = at.global_step;
    epoch_sums.load(at.meta, o.resume);
  }
  // Every rank from rank 0's weights (and state), whatever each made or loaded.
  if (m.comm && !m.resumed) train::broadcast_persistents(*m.session, *m.comm);
  m.resumed = true;  // a later fit() continues from this trainer's own position
  if (m.global_step >= total) {
    fail("fit: the run has already trained its " + std::to_string(total) + " steps (" +
         std::to_string(o.epochs) + " epochs)");
  }
  loader.seek(m.global_step / per_epoch, m.global_step % per_epoch);
  OptimizerStepper stepper(o.optimizer, (total + acc - 1) / acc);
  stepper.seek(m.global_step);

  const std::vector<Metric> metrics = with_loss(o.metrics);
  auto save = [&](DataLoader::Position next) {
    if (o.checkpoint.empty()) return;
    // Sums of an update still being accumulated: the ranks' mean stands for them all (the
    // update takes the mean again, so replacing each rank's own by it changes nothing), and
    // the checkpoint holds what one process with the whole batch would.
    if (m.comm && o.optimizer.accumulate > 1) {
      train::average_over_ranks(*m.session, m.split.gradient_sums, *m.comm);
    }
    if (m.rank() != 0) return;
    train::Meta extra;
    epoch_sums.save(extra);
    train::save_checkpoint(o.checkpoint, *m.session, m.identity(), m.global_step, next, extra,
                           m.transient);
  };

  TrainHistory history;
  const auto t0 = Clock::now();
  const int64_t steps_at_start = m.global_step;
  int64_t samples = 0;
  bool stop = false;
  TrainEvent e;
  e.epochs = o.epochs;
  e.steps_per_epoch = per_epoch;
  e.total_steps = total;
  try {
    while (m.global_step < total && !stop) {
      const TensorBatch data = loader.next();
      const TensorBatch b = m.comm ? train::shard_batch(data, m.rank(), m.train_batch) : data;
      m.feed("train", b, m.train_feeds, m.train_batch);
      e.lr = stepper.lr();
      if (!m.comm) stepper.set_inputs(*m.session);
      m.session->step("train");
      const std::map<std::string, Array> outputs = m.read_outputs("train", m.train_outputs);
      e.loss = outputs.at("loss").data[0];
      MetricSums step_sums;
      m.measure(step_sums, metrics, b, m.train_batch, outputs);
      if (m.comm) {
        m.reduce_step(step_sums, e.loss);
        if (stepper.applies_next()) {
          train::update_over_ranks(*m.session, m.split, o.optimizer, stepper.lr(),
                                   stepper.updates() + 1, *m.comm, o.check_ranks);
        }
      }
      stepper.advance();
      ++m.global_step;
      if (!std::isfinite(e.loss)) {
        fail("training diverged: loss is " + std::to_string(e.loss) + " at step " +
             std::to_string(m.global_step) + " (lower the learning rate?)");
      }
      epoch_sums.add(step_sums);
      samples += data.rows;

      e.kind = TrainEvent::Kind::step;
      e.epoch = b.epoch;
      e.step = b.step + 1;
      e.global_step = m.global_step;
      e.metrics = epoch_sums.means();
      e.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      e.samples_per_second = static_cast<double>(samples) / std::max(e.seconds, 1e-9);
      e.eta_seconds = e.seconds / static_cast<double>(m.global_step - steps_at_start) *
                      static_cast<double>(total - m.global_step);
      m.emit(e, stop);
      if (o.max_steps > 0 && m.global_step >= o.max_steps) stop = true;

      const bool epoch_done = e.step == per_epoch;
      const bool eval_now = eval && (o.eval_every > 0 ? m.global_step % o.eval_every == 0
                                                      : epoch_done);
      const DataLoader::Position next = loader.position();
      if (epoch_done) {
        // Before the evaluation reads them: every tensor finite (the loss predates the last
        // update), checked by the checkpoint's one read of them when the run keeps one.
        epoch_sums = {};
        if (o.checkpoint.empty()) {
          train::check_finite(*m.session, m.global_step);
        } else {
          save(next);
        }
      }
      if (eval_now) {
        e.kind = TrainEvent::Kind::evaluation;
        e.eval_metrics = m.evaluate(*eval);  // checked at the start of fit
        history.eval_metrics = e.eval_metrics;
        m.emit(e, stop);
      }
      if (epoch_done) {
        history.epochs.push_back({e.epoch, e.metrics, eval_now ? e.eval_metrics
                                                              : std::map<std::string, double>{}});
        e.kind = TrainEvent::Kind::epoch_end;
        m.emit(e, stop);
      } else if (stop || (o.checkpoint_every > 0 && m.global_step % o.checkpoint_every == 0)) {
        save(next);
      }
    }
  } catch (...) {
    if (m.printer) m.printer->finish();
    throw;
  }
  if (m.printer) m.printer->finish();
  history.stopped = m.global_step < total;
  history.steps = m.global_step;
  history.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  history.samples_per_second = static_cast<double>(samples) / std::max(history.seconds, 1e-9);
  return history;
}

}  // namespace mn
