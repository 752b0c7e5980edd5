#pragma once
// An e-node: operator, attribute word and children (e-class ids). Children live inline up to
// four (almost every tensor op), so adding and canonicalizing nodes does not allocate.
#include <cstring>
#include <initializer_list>
#include <span>

#include "egraph/id.h"

namespace mn::egraph {

class ENode {
 public:
  ENode() = default;
  ENode(OpId op, Attr attr, std::span<const Id> children);
  ENode(OpId op, Attr attr, std::initializer_list<Id> children)
      : ENode(op, attr, std::span<const Id>(children.begin(), children.size())) {}
  explicit ENode(OpId op, std::initializer_list<Id> children = {}) : ENode(op, 0, children) {}

  ENode(const ENode& other);
  ENode(ENode&& other) noexcept;
  ENode& operator=(const ENode& other);
  ENode& operator=(ENode&& other) noexcept;
  ~ENode() { release(); }

  OpId op() const { return op_; }
  Attr attr() const { return attr_; }
  uint32_t arity() const { return arity_; }
  std::span<const Id> children() const { return {data(), arity_}; }
  std::span<Id> children() { return {data(), arity_}; }
  Id child(size_t i) const { return data()[i]; }

  // Same operator, attribute and arity: the children may still differ.
  bool same_head(const ENode& other) const {
    return op_ == other.op_ && attr_ == other.attr_ && arity_ == other.arity_;
  }
  bool operator==(const ENode& other) const {
    return same_head(other) && std::memcmp(data(), other.data(), arity_ * sizeof(Id)) == 0;
  }
  uint64_t hash() const;

 private:
  static constexpr uint32_t inline_capacity = 4;
  const Id* data() const { return arity_ <= inline_capacity ? inline_ : heap_; }
  Id* data() { return arity_ <= inline_capacity ? inline_ : heap_; }
  void release() {
    if (arity_ > inline_capacity) delete[] heap_;
  }
  void copy_from(const ENode& other);

  OpId op_ = 0;
  uint32_t arity_ = 0;
  Attr attr_ = 0;
  union {
    Id inline_[inline_capacity] = {};
    Id* heap_;
  };
};

}  // namespace mn::egraph
