#include "support/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mn::support {
namespace {

// Worker threads taking tasks in order, made on first use and never ended (the process's exit
// ends them; the pool is never destroyed, so no thread outlives what it uses).
class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool(std::max(1u, std::thread::hardware_concurrency()) - 1);
    return *pool;
  }
  unsigned size() const { return size_; }
  void submit(std::function<void()> task) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

 private:
  explicit Pool(unsigned threads) : size_(threads) {
    for (unsigned t = 0; t < threads; ++t) {
      std::thread([this] {
        for (;;) {
          std::function<void()> task;
          {
            std::unique_lock<std::mutex> lock(mutex_);
            ready_.wait(lock, [this] { return !tasks_.empty(); });
            task = std::move(tasks_.front());
            tasks_.pop_front();
          }
          task();
        }
      }).detach();
    }
  }
  const unsigned size_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
};

// One call's items, shared with the helpers it queued (which may start after the call returned).
struct Job {
  size_t n = 0;
  const std::function<void(size_t)>* fn = nullptr;
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors;
  std::mutex mutex;
  std::condition_variable idle;
  int active = 0;       // helpers working through items
  bool closed = false;  // the caller is done: helpers not yet started skip the job

  void work() {
    for (size_t i = next++; i < n; i = next++) {
      try {
        (*fn)(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  }
};

}  // namespace

void parallel_for(size_t n, unsigned threads, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  Pool& pool = Pool::get();
  if (threads == 0) threads = pool.size() + 1;
  const auto helpers = static_cast<unsigned>(std::min<size_t>({threads - 1, pool.size(), n - 1}));
  auto job = std::make_shared<Job>();
  job->n = n;
  job->fn = &fn;
  job->errors.resize(n);
  for (unsigned h = 0; h < helpers; ++h) {
    pool.submit([job] {
      {
        const std::lock_guard<std::mutex> lock(job->mutex);
        if (job->closed) return;
        ++job->active;
      }
      job->work();
      {
        const std::lock_guard<std::mutex> lock(job->mutex);
        --job->active;
      }
      job->idle.notify_all();
    });
  }
  job->work();
  {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->closed = true;
    job->idle.wait(lock, [&] { return job->active == 0; });
  }
  for (const std::exception_ptr& e : job->errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace mn::support
