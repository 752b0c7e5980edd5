#pragma once
// A vector of trivially copyable values with N inline slots. Most e-classes hold one node and
// have a handful of parents, so keeping those lists inline saves two heap allocations per added
// node, and the frees that would follow on every merge.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace mn::egraph {

template <class T, uint32_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  SmallVector() = default;
  SmallVector(const SmallVector& other) { append(other.begin(), other.end()); }
  SmallVector(SmallVector&& other) noexcept { steal(other); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) {
      size_ = 0;
      append(other.begin(), other.end());
    }
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      release();
      steal(other);
    }
    return *this;
  }
  ~SmallVector() { release(); }

  uint32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return cap_ > N ? heap_ : inline_; }
  const T* data() const { return cap_ > N ? heap_ : inline_; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& back() { return data()[size_ - 1]; }
  operator std::span<const T>() const { return {data(), size_}; }

  void push_back(T v) {
    if (size_ == cap_) grow(size_ + 1);
    data()[size_++] = v;
  }
  void append(const T* first, const T* last) {
    uint32_t n = static_cast<uint32_t>(last - first);
    if (size_ + n > cap_) grow(size_ + n);
    if (n > 0) std::memcpy(data() + size_, first, n * sizeof(T));
    size_ += n;
  }
  void resize_down(uint32_t n) { size_ = std::min(size_, n); }
  void clear() { size_ = 0; }
  // Frees the heap buffer, if any.
  void reset() {
    release();
    size_ = 0;
    cap_ = N;
  }
  // Keeps the elements for which keep(x) holds, in order.
  template <class Pred>
  void retain(Pred keep) {
    T* d = data();
    uint32_t out = 0;
    for (uint32_t i = 0; i < size_; ++i)
      if (keep(d[i])) d[out++] = d[i];
    size_ = out;
  }

 private:
  void grow(uint32_t need) {
    uint32_t cap = std::max(need, cap_ * 2);
    T* fresh = new T[cap];
    if (size_ > 0) std::memcpy(fresh, data(), size_ * sizeof(T));
    release();
    heap_ = fresh;
    cap_ = cap;
  }
  void release() {
    if (cap_ > N) delete[] heap_;
  }
  void steal(SmallVector& other) {
    size_ = other.size_;
    cap_ = other.cap_;
    if (cap_ > N) {
      heap_ = other.heap_;
    } else if (size_ > 0) {
      std::memcpy(inline_, other.inline_, size_ * sizeof(T));
    }
    other.size_ = 0;
    other.cap_ = N;
  }

  uint32_t size_ = 0;
  uint32_t cap_ = N;
  union {
    T inline_[N];
    T* heap_;
  };
};

}  // namespace mn::egraph
