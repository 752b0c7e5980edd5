// The built-in metrics: means of outputs and classification accuracy over the real rows of a
// batch.
#include <algorithm>
#include <string>

#include <meganeura/error.h>
#include <meganeura/trainer.h>

namespace mn {

namespace {

const Array& output_of(const MetricInput& in, const std::string& metric, const std::string& name) {
  auto it = in.outputs.find(name);
  if (it == in.outputs.end()) {
    throw Error("metric '" + metric + "': output '" + name + "' was not read");
  }
  return it->second;
}

}  // namespace

Metric Metric::mean(const std::string& output, std::string name) {
  Metric m;
  m.name = name.empty() ? output : std::move(name);
  m.outputs = {output};
  m.measure = [output, metric = m.name](const MetricInput& in) -> std::pair<double, double> {
    const Array& a = output_of(in, metric, output);
    const auto rows = static_cast<double>(in.batch.rows);
    if (a.numel() == 1) {
      if (in.batch.rows < in.batch_size && !in.padding_neutral) {
        throw Error("metric '" + metric + "': the batch holds " + std::to_string(in.batch.rows) +
                    " samples padded to " + std::to_string(in.batch_size) + ", and output '" +
                    output + "' is one value over all of them: set TrainerOptions::pad_values "
                    "to values that make padding rows count for nothing (e.g. -100 for the "
                    "labels of cross_entropy), or use a batch size dividing the data");
      }
      return {a.data[0] * rows, rows};
    }
    if (a.rank() == 0 || a.shape[0] != in.batch_size) {
      throw ShapeError("metric '" + metric + "': output '" + output + "' is " + a.type().str() +
                       ", neither one value nor [" + std::to_string(in.batch_size) + ", ...]");
    }
    const int64_t per_row = a.numel() / in.batch_size;
    double sum = 0;
    for (int64_t i = 0; i < in.batch.rows * per_row; ++i) sum += a.data[static_cast<size_t>(i)];
    return {sum, static_cast<double>(in.batch.rows * per_row)};
  };
  return m;
}

Metric Metric::accuracy(const std::string& logits, const std::string& labels, std::string name) {
  Metric m;
  m.name = std::move(name);
  m.outputs = {logits};
  m.measure = [logits, labels, metric = m.name](const MetricInput& in) -> std::pair<double, double> {
    const Array& a = output_of(in, metric, logits);
    if (a.rank() != 2 || a.shape[0] != in.batch_size) {
      throw ShapeError("metric '" + metric + "': output '" + logits + "' is " + a.type().str() +
                       ", expected [" + std::to_string(in.batch_size) + ", classes]");
    }
    auto it = in.batch.columns.find(labels);
    if (it == in.batch.columns.end()) {
      throw Error("metric '" + metric + "': the data has no column '" + labels + "'");
    }
    const Array y = it->second.to_array();
    if (is_float(y.dtype) || y.numel() != in.batch.rows) {
      throw ShapeError("metric '" + metric + "': column '" + labels + "' is " + y.type().str() +
                       ", expected integer labels, one per sample");
    }
    const int64_t classes = a.shape[1];
    double correct = 0;
    for (int64_t i = 0; i < in.batch.rows; ++i) {
      const double* row = a.data.data() + i * classes;
      correct += static_cast<double>(std::max_element(row, row + classes) - row) ==
                 y.data[static_cast<size_t>(i)];
    }
    return {correct, static_cast<double>(in.batch.rows)};
  };
  return m;
}

const char* train_event_name(TrainEvent::Kind k) {
  switch (k) {
    case TrainEvent::Kind::step:
      return "step";
    case TrainEvent::Kind::evaluation:
      return "evaluation";
    case TrainEvent::Kind::epoch_end:
      return "epoch_end";
  }
  return "?";
}

}  // namespace mn
