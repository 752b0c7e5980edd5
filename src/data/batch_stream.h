#pragma once
// The machinery every loader shares: the sample order of an epoch as a pure function of
// (seed, epoch), and an endless stream of batches built on a bounded prefetch thread, which
// seek() restarts exactly at a position (resuming a run). What a batch holds is the loader's.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <meganeura/error.h>

#include "ir/random.h"

namespace mn::data {

struct StreamPosition {
  int64_t epoch = 0;
  int64_t step = 0;
};

// 0..n-1, shuffled by Fisher-Yates driven by counter-based random numbers of (seed, epoch), so
// any epoch's order can be recomputed on its own.
inline std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> o(static_cast<size_t>(n));
  std::iota(o.begin(), o.end(), int64_t{0});
  if (!shuffle) return o;
  const uint64_t stream = random_bits(seed, static_cast<uint64_t>(epoch));
  for (size_t i = o.size(); i > 1; --i) {
    const auto r = static_cast<unsigned __int128>(random_bits(stream, i)) * i;
    std::swap(o[i - 1], o[static_cast<size_t>(r >> 64)]);
  }
  return o;
}

// The order of the epoch being built, computed once per epoch (by whichever thread builds).
class EpochOrderCache {
 public:
  const std::vector<int64_t>& of(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
    if (epoch != epoch_) {
      order_ = epoch_order(n, shuffle, seed, epoch);
      epoch_ = epoch;
    }
    return order_;
  }

 private:
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

// Batches per epoch of n samples; mn::Error (starting with `who`) when there are none.
inline int64_t batches_per_epoch(const char* who, int64_t n, int64_t batch_size, bool drop_last,
                                 int64_t prefetch) {
  if (batch_size <= 0) {
    throw Error(std::string(who) + ": batch size " + std::to_string(batch_size) +
                " is not positive");
  }
  if (prefetch < 0) {
    throw Error(std::string(who) + ": prefetch " + std::to_string(prefetch) + " is negative");
  }
  const int64_t per_epoch = drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
  if (per_epoch == 0) {
    throw Error(std::string(who) + ": " + std::to_string(n) + " samples make no batch of " +
                std::to_string(batch_size) + (drop_last ? " with drop_last" : ""));
  }
  return per_epoch;
}

// Batches of type B, built by `build(position)` in order, `prefetch` ahead on a thread (0: on
// next()). A failure of `build` reaches next() after the batches before it, and stays until
// seek().
template <class B>
class BatchStream {
 public:
  using Build = std::function<B(StreamPosition)>;

  BatchStream(int64_t per_epoch, int64_t prefetch, Build build)
      : per_epoch_(per_epoch), prefetch_(prefetch), build_(std::move(build)) {
    start();
  }
  ~BatchStream() { halt(); }
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  int64_t per_epoch() const { return per_epoch_; }
  StreamPosition position() const { return pos_; }

  B next() {
    if (failed_) std::rethrow_exception(failed_);
    B b;
    if (prefetch_ <= 0) {
      try {
        b = build_(pos_);
      } catch (...) {
        failed_ = std::current_exception();
        throw;
      }
    } else {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [&] { return !queue_.empty() || error_; });
      if (queue_.empty()) {
        failed_ = error_;
        std::rethrow_exception(failed_);
      }
      b = std::move(queue_.front());
      queue_.pop_front();
      changed_.notify_all();
    }
    pos_ = advance(pos_);
    return b;
  }

  // `who` names the loader in the error for a position outside the epoch.
  void seek(const char* who, int64_t epoch, int64_t step) {
    if (epoch < 0 || step < 0 || step > per_epoch_) {
      throw Error(std::string(who) + "::seek: position (epoch " + std::to_string(epoch) +
                  ", step " + std::to_string(step) + ") is outside [0, " +
                  std::to_string(per_epoch_) + "] steps of a non-negative epoch");
    }
    halt();
    failed_ = nullptr;
    pos_ = step == per_epoch_ ? StreamPosition{epoch + 1, 0} : StreamPosition{epoch, step};
    start();
  }

 private:
  StreamPosition advance(StreamPosition p) const {
    return ++p.step == per_epoch_ ? StreamPosition{p.epoch + 1, 0} : p;
  }

  void produce(StreamPosition p) {
    for (;;) {
      B b;
      try {
        b = build_(p);
      } catch (...) {
        std::lock_guard lock(mu_);
        error_ = std::current_exception();
        changed_.notify_all();
        return;
      }
      std::unique_lock lock(mu_);
      changed_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < prefetch_; });
      if (stop_) return;
      queue_.push_back(std::move(b));
      changed_.notify_all();
      p = advance(p);
    }
  }

  void start() {
    if (prefetch_ <= 0) return;
    stop_ = false;
    queue_.clear();
    error_ = nullptr;
    worker_ = std::thread([this, p = pos_] { produce(p); });
  }

  void halt() {
    if (!worker_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    worker_.join();
    queue_.clear();
    error_ = nullptr;
  }

  int64_t per_epoch_;
  int64_t prefetch_;
  Build build_;  // called on the producer thread only while one runs
  StreamPosition pos_;

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<B> queue_;
  std::exception_ptr error_;  // the producer failed after the queued batches
  bool stop_ = false;
  std::thread worker_;
  std::exception_ptr failed_;  // delivered to the caller; sticky until seek()
};

}  // namespace mn::data
