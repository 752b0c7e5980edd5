// The DataLoader: deterministic per-epoch shuffling and a bounded prefetch thread.
#include <meganeura/data.h>
#include <meganeura/error.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "ir/random.h"

namespace mn {

Array Batch::inputs_array() const { return Array::from_f32(inputs_shape, inputs, DType::f32); }

Array Batch::labels_array() const {
  return Array({size()}, DType::i32, std::vector<double>(labels.begin(), labels.end()));
}

struct DataLoader::Impl {
  std::shared_ptr<const Dataset> data;
  DataLoaderOptions opt;
  int64_t per_epoch = 0;
  Position pos;  // of the batch next() returns next

  // The order of the epoch the producer is in, computed once per epoch.
  int64_t order_epoch = -1;
  std::vector<int64_t> order;

  // Prefetch state. The producer owns `produce_at` and the order cache; the rest is guarded.
  std::mutex mu;
  std::condition_variable changed;
  std::deque<Batch> queue;
  std::exception_ptr error;  // the producer failed after the queued batches
  bool stop = false;
  std::thread worker;
  std::exception_ptr failed;  // delivered to the caller; sticky until seek()

  Position advance(Position p) const {
    return ++p.step == per_epoch ? Position{p.epoch + 1, 0} : p;
  }

  std::vector<int64_t> make_order(int64_t epoch) const {
    std::vector<int64_t> o(static_cast<size_t>(data->size()));
    std::iota(o.begin(), o.end(), int64_t{0});
    if (!opt.shuffle) return o;
    // Fisher-Yates driven by counter-based random numbers of (seed, epoch), so any epoch's
    // order can be recomputed on its own when a run resumes.
    const uint64_t stream = random_bits(opt.seed, static_cast<uint64_t>(epoch));
    for (size_t i = o.size(); i > 1; --i) {
      const auto r = static_cast<unsigned __int128>(random_bits(stream, i)) * i;
      std::swap(o[i - 1], o[static_cast<size_t>(r >> 64)]);
    }
    return o;
  }

  Batch build(Position p) {
    if (p.epoch != order_epoch) {
      order = make_order(p.epoch);
      order_epoch = p.epoch;
    }
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

  void produce(Position p) {
    for (;;) {
      Batch b;
      try {
        b = build(p);
      } catch (...) {
        std::lock_guard lock(mu);
        error = std::current_exception();
        changed.notify_all();
        return;
      }
      std::unique_lock lock(mu);
      changed.wait(lock, [&] { return stop || static_cast<int64_t>(queue.size()) < opt.prefetch; });
      if (stop) return;
      queue.push_back(std::move(b));
      changed.notify_all();
      p = advance(p);
    }
  }

  void start() {
    if (opt.prefetch <= 0) return;
    stop = false;
    queue.clear();
    error = nullptr;
    worker = std::thread([this, p = pos] { produce(p); });
  }

  void halt() {
    if (!worker.joinable()) return;
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    changed.notify_all();
    worker.join();
    queue.clear();
    error = nullptr;
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> data, DataLoaderOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!data) throw Error("DataLoader: no data set");
  data->validate();
  if (options.batch_size <= 0) {
    throw Error("DataLoader: batch size " + std::to_string(options.batch_size) +
                " is not positive");
  }
  if (options.prefetch < 0) {
    throw Error("DataLoader: prefetch " + std::to_string(options.prefetch) + " is negative");
  }
  const int64_t n = data->size();
  const int64_t per_epoch = options.drop_last ? n / options.batch_size
                                              : (n + options.batch_size - 1) / options.batch_size;
  if (per_epoch == 0) {
    throw Error("DataLoader: " + std::to_string(n) + " samples make no batch of " +
                std::to_string(options.batch_size) + (options.drop_last ? " with drop_last" : ""));
  }
  impl_->data = std::move(data);
  impl_->opt = std::move(options);
  impl_->per_epoch = per_epoch;
  impl_->start();
}

DataLoader::~DataLoader() { impl_->halt(); }

int64_t DataLoader::batches_per_epoch() const { return impl_->per_epoch; }

DataLoader::Position DataLoader::position() const { return impl_->pos; }

const Dataset& DataLoader::dataset() const { return *impl_->data; }

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  if (epoch < 0) throw Error("DataLoader: epoch " + std::to_string(epoch) + " is negative");
  return impl_->make_order(epoch);
}

Batch DataLoader::next() {
  Impl& m = *impl_;
  if (m.failed) std::rethrow_exception(m.failed);
  Batch b;
  if (m.opt.prefetch <= 0) {
    try {
      b = m.build(m.pos);
    } catch (...) {
      m.failed = std::current_exception();
      throw;
    }
  } else {
    std::unique_lock lock(m.mu);
    m.changed.wait(lock, [&] { return !m.queue.empty() || m.error; });
    if (m.queue.empty()) {
      m.failed = m.error;
      std::rethrow_exception(m.failed);
    }
    b = std::move(m.queue.front());
    m.queue.pop_front();
    m.changed.notify_all();
  }
  m.pos = m.advance(m.pos);
  return b;
}

void DataLoader::seek(int64_t epoch, int64_t step) {
  Impl& m = *impl_;
  if (epoch < 0 || step < 0 || step > m.per_epoch) {
    throw Error("DataLoader::seek: position (epoch " + std::to_string(epoch) + ", step " +
                std::to_string(step) + ") is outside [0, " + std::to_string(m.per_epoch) +
                "] steps of a non-negative epoch");
  }
  m.halt();
  m.failed = nullptr;
  m.pos = step == m.per_epoch ? Position{epoch + 1, 0} : Position{epoch, step};
  m.start();
}

}  // namespace mn
