#pragma once
// Typed op attributes behind one type-erased handle. An attribute struct lists its fields once:
//
//   struct ReduceAttrs {
//     std::vector<int64_t> axes; bool keepdims = false;
//     auto fields() const { return std::tie(axes, keepdims); }
//     static constexpr std::array<const char*, 2> names{"axes", "keepdims"};
//   };
//
// and printing, hashing and equality follow from that list.
#include <array>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <meganeura/dtype.h>
#include <meganeura/error.h>

namespace mn {

namespace attr_detail {

inline uint64_t hash_mix(uint64_t h, uint64_t v) {
  // splitmix64 finalizer over the running hash: stable across runs and platforms.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed);

template <class T>
concept AttrStruct = requires(const T& t) {
  t.fields();
  T::names;
};

inline uint64_t hash_value(bool v, uint64_t h) { return hash_mix(h, v ? 1 : 2); }
inline uint64_t hash_value(int64_t v, uint64_t h) { return hash_mix(h, static_cast<uint64_t>(v)); }
inline uint64_t hash_value(int v, uint64_t h) { return hash_mix(h, static_cast<uint64_t>(v)); }
inline uint64_t hash_value(uint64_t v, uint64_t h) { return hash_mix(h, v); }
uint64_t hash_value(double v, uint64_t h);
uint64_t hash_value(const std::string& v, uint64_t h);
inline uint64_t hash_value(DType v, uint64_t h) {
  return hash_mix(h, static_cast<uint64_t>(v) + 77);
}
template <class T>
requires std::is_enum_v<T> uint64_t hash_value(T v, uint64_t h) {
  return hash_mix(h, static_cast<uint64_t>(v));
}
template <class T>
uint64_t hash_value(const std::vector<T>& v, uint64_t h) {
  h = hash_mix(h, v.size());
  for (const auto& x : v) h = hash_value(x, h);
  return h;
}
template <class T>
uint64_t hash_value(const std::shared_ptr<const T>& p, uint64_t h) {
  return p ? hash_value(*p, h) : hash_mix(h, 0);
}

inline void print_value(std::ostream& os, bool v) { os << (v ? "true" : "false"); }
inline void print_value(std::ostream& os, int64_t v) { os << v; }
inline void print_value(std::ostream& os, int v) { os << v; }
inline void print_value(std::ostream& os, uint64_t v) { os << v; }
void print_value(std::ostream& os, double v);
inline void print_value(std::ostream& os, const std::string& v) { os << '"' << v << '"'; }
inline void print_value(std::ostream& os, DType v) { os << dtype_name(v); }
template <class T>
requires std::is_enum_v<T>
void print_value(std::ostream& os, T v) { os << static_cast<int>(v); }
template <class T>
void print_value(std::ostream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ", ";
    if (v.size() > 8 && i == 4) {
      os << "... " << v.size() - 5 << " more, ";
      i = v.size() - 1;
    }
    print_value(os, v[i]);
  }
  os << ']';
}
template <class T>
void print_value(std::ostream& os, const std::shared_ptr<const T>& p) {
  if (p)
    print_value(os, *p);
  else
    os << "null";
}

// Attribute structs nest (an initializer inside parameter attributes): hash and print fields.
template <AttrStruct T>
uint64_t hash_value(const T& v, uint64_t h) {
  std::apply([&](const auto&... f) { ((h = hash_value(f, h)), ...); }, v.fields());
  return h;
}
template <AttrStruct T>
void print_value(std::ostream& os, const T& v) {
  size_t i = 0;
  os << '{';
  std::apply(
      [&](const auto&... f) {
        ((os << (i ? ", " : "") << T::names[i] << '=', print_value(os, f), ++i), ...);
      },
      v.fields());
  os << '}';
}

struct Concept {
  virtual ~Concept() = default;
  virtual const std::type_info& type() const = 0;
  virtual uint64_t hash() const = 0;
  virtual bool equals(const Concept& other) const = 0;
  virtual void print(std::ostream& os) const = 0;
  virtual const void* raw() const = 0;
};

template <AttrStruct T>
struct Model final : Concept {
  T value;
  explicit Model(T v) : value(std::move(v)) {}
  const std::type_info& type() const override { return typeid(T); }
  uint64_t hash() const override {
    uint64_t h = hash_bytes(typeid(T).name(), std::char_traits<char>::length(typeid(T).name()), 1);
    std::apply([&](const auto&... f) { ((h = hash_value(f, h)), ...); }, value.fields());
    return h;
  }
  bool equals(const Concept& other) const override {
    return other.type() == typeid(T) &&
           value.fields() == static_cast<const Model&>(other).value.fields();
  }
  void print(std::ostream& os) const override {
    size_t i = 0;
    std::apply(
        [&](const auto&... f) {
          ((os << (i ? ", " : "") << T::names[i] << '=', print_value(os, f), ++i), ...);
        },
        value.fields());
  }
  const void* raw() const override { return &value; }
};

}  // namespace attr_detail

// For ops without attributes.
struct NoAttrs {
  auto fields() const { return std::tie(); }
  static constexpr std::array<const char*, 0> names{};
};

class Attrs {
 public:
  Attrs() : Attrs(NoAttrs{}) {}
  template <attr_detail::AttrStruct T>
  Attrs(T value)  // NOLINT(google-explicit-constructor): attribute structs convert implicitly
      : p_(std::make_shared<attr_detail::Model<T>>(std::move(value))) {}

  template <class T>
  bool is() const {
    return p_->type() == typeid(T);
  }
  // The typed struct; throws mn::Error when the op carries a different attribute type.
  template <class T>
  const T& as() const {
    if (!is<T>()) {
      throw Error(std::string("attribute type mismatch: have ") + p_->type().name() + ", want " +
                  typeid(T).name());
    }
    return *static_cast<const T*>(p_->raw());
  }
  uint64_t hash() const { return p_->hash(); }
  bool operator==(const Attrs& o) const { return p_ == o.p_ || p_->equals(*o.p_); }
  std::string str() const {
    std::ostringstream os;
    p_->print(os);
    return os.str();
  }

 private:
  std::shared_ptr<const attr_detail::Concept> p_;
};

}  // namespace mn
