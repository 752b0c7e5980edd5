// Batches of a TensorDataset: every column's rows gathered in the epoch's order.
#include <cstring>
#include <optional>

#include <meganeura/error.h>
#include <meganeura/tensor_data.h>

#include "data/batch_stream.h"

namespace mn {

struct TensorLoader::Impl {
  std::shared_ptr<const TensorDataset> data;
  TensorLoaderOptions opt;
  data::EpochOrderCache orders;
  std::optional<data::BatchStream<TensorBatch>> stream;

  TensorBatch build(data::StreamPosition p) {
    const std::vector<int64_t>& order = orders.of(data->size(), opt.shuffle, opt.seed, p.epoch);
    const int64_t begin = p.step * opt.batch_size;
    TensorBatch b;
    b.epoch = p.epoch;
    b.step = p.step;
    b.rows = std::min(opt.batch_size, data->size() - begin);
    b.indices.assign(order.begin() + begin, order.begin() + begin + b.rows);
    for (const auto& [name, c] : data->columns()) {
      Column out;
      out.dtype = c.dtype;
      out.shape = c.shape;
      out.shape[0] = b.rows;
      const size_t w = c.row_bytes();
      out.bytes.resize(static_cast<size_t>(b.rows) * w);
      for (int64_t i = 0; i < b.rows; ++i) {
        std::memcpy(out.bytes.data() + i * w, c.bytes.data() + b.indices[i] * w, w);
      }
      b.columns.emplace(name, std::move(out));
    }
    return b;
  }
};

TensorLoader::TensorLoader(std::shared_ptr<const TensorDataset> data, TensorLoaderOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!data) throw Error("TensorLoader: no data set");
  if (data->columns().empty()) throw Error("TensorLoader: the data set has no column");
  const int64_t per_epoch = data::batches_per_epoch(
      "TensorLoader", data->size(), options.batch_size, options.drop_last, options.prefetch);
  impl_->data = std::move(data);
  impl_->opt = options;
  impl_->stream.emplace(per_epoch, options.prefetch,
                        [m = impl_.get()](data::StreamPosition p) { return m->build(p); });
}

TensorLoader::~TensorLoader() { impl_->stream.reset(); }

int64_t TensorLoader::batches_per_epoch() const { return impl_->stream->per_epoch(); }

DataLoader::Position TensorLoader::position() const {
  const data::StreamPosition p = impl_->stream->position();
  return {p.epoch, p.step};
}

TensorBatch TensorLoader::next() { return impl_->stream->next(); }

void TensorLoader::seek(int64_t epoch, int64_t step) {
  impl_->stream->seek("TensorLoader", epoch, step);
}

std::vector<int64_t> TensorLoader::epoch_order(int64_t epoch) const {
  if (epoch < 0) throw Error("TensorLoader: epoch " + std::to_string(epoch) + " is negative");
  return data::epoch_order(impl_->data->size(), impl_->opt.shuffle, impl_->opt.seed, epoch);
}

const TensorDataset& TensorLoader::dataset() const { return *impl_->data; }

}  // namespace mn
