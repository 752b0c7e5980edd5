// The DataLoader: batches of a classification Dataset (inputs and labels) on a BatchStream.
#include <meganeura/data.h>
#include <meganeura/error.h>

#include <cstring>
#include <optional>

#include "data/batch_stream.h"

namespace mn {

Array Batch::inputs_array() const { return Array::from_f32(inputs_shape, inputs, DType::f32); }

Array Batch::labels_array() const {
  return Array({size()}, DType::i32, std::vector<double>(labels.begin(), labels.end()));
}

struct DataLoader::Impl {
  std::shared_ptr<const Dataset> data;
  DataLoaderOptions opt;
  data::EpochOrderCache orders;
  std::optional<data::BatchStream<Batch>> stream;

  Batch build(data::StreamPosition p) {
    const std::vector<int64_t>& order = orders.of(data->size(), opt.shuffle, opt.seed, p.epoch);
    const int64_t n = data->size();
    const int64_t begin = p.step * opt.batch_size;
    const int64_t count = std::min(opt.batch_size, n - begin);
    const int64_t width = data->sample_numel();
    Batch b;
    b.epoch = p.epoch;
    b.step = p.step;
    b.inputs_shape = {count};
    b.inputs_shape.insert(b.inputs_shape.end(), data->sample_shape.begin(),
                          data->sample_shape.end());
    b.inputs.resize(static_cast<size_t>(count * width));
    b.labels.resize(static_cast<size_t>(count));
    b.indices.assign(order.begin() + begin, order.begin() + begin + count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t row = b.indices[i];
      std::memcpy(b.inputs.data() + i * width, data->inputs.data() + row * width,
                  static_cast<size_t>(width) * sizeof(float));
      b.labels[i] = data->labels[row];
    }
    if (opt.transform) opt.transform(b);
    return b;
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> data, DataLoaderOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!data) throw Error("DataLoader: no data set");
  data->validate();
  const int64_t per_epoch = data::batches_per_epoch(
      "DataLoader", data->size(), options.batch_size, options.drop_last, options.prefetch);
  impl_->data = std::move(data);
  impl_->opt = std::move(options);
  impl_->stream.emplace(per_epoch, impl_->opt.prefetch,
                        [m = impl_.get()](data::StreamPosition p) { return m->build(p); });
}

DataLoader::~DataLoader() { impl_->stream.reset(); }  // joins the prefetch thread

int64_t DataLoader::batches_per_epoch() const { return impl_->stream->per_epoch(); }

DataLoader::Position DataLoader::position() const {
  const data::StreamPosition p = impl_->stream->position();
  return {p.epoch, p.step};
}

const Dataset& DataLoader::dataset() const { return *impl_->data; }

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  if (epoch < 0) throw Error("DataLoader: epoch " + std::to_string(epoch) + " is negative");
  return data::epoch_order(impl_->data->size(), impl_->opt.shuffle, impl_->opt.seed, epoch);
}

Batch DataLoader::next() { return impl_->stream->next(); }

void DataLoader::seek(int64_t epoch, int64_t step) { impl_->stream->seek("DataLoader", epoch, step); }

}  // namespace mn
