#include "egraph/enode.h"

#include <utility>

namespace mn::egraph {

ENode::ENode(OpId op, Attr attr, std::span<const Id> children)
    : op_(op), arity_(static_cast<uint32_t>(children.size())), attr_(attr) {
  if (arity_ > inline_capacity) heap_ = new Id[arity_];
  if (arity_ > 0) std::memcpy(data(), children.data(), arity_ * sizeof(Id));
}

void ENode::copy_from(const ENode& other) {
  op_ = other.op_;
  arity_ = other.arity_;
  attr_ = other.attr_;
  if (arity_ > inline_capacity) heap_ = new Id[arity_];
  if (arity_ > 0) std::memcpy(data(), other.data(), arity_ * sizeof(Id));
}

ENode::ENode(const ENode& other) { copy_from(other); }

ENode::ENode(ENode&& other) noexcept : op_(other.op_), arity_(other.arity_), attr_(other.attr_) {
  if (arity_ > inline_capacity) {
    heap_ = other.heap_;
    other.arity_ = 0;
  } else if (arity_ > 0) {
    std::memcpy(inline_, other.inline_, arity_ * sizeof(Id));
  }
}

ENode& ENode::operator=(const ENode& other) {
  if (this != &other) {
    release();
    arity_ = 0;
    copy_from(other);
  }
  return *this;
}

ENode& ENode::operator=(ENode&& other) noexcept {
  if (this != &other) {
    release();
    op_ = other.op_;
    arity_ = other.arity_;
    attr_ = other.attr_;
    if (arity_ > inline_capacity) {
      heap_ = other.heap_;
      other.arity_ = 0;
    } else if (arity_ > 0) {
      std::memcpy(inline_, other.inline_, arity_ * sizeof(Id));
    }
  }
  return *this;
}

uint64_t ENode::hash() const {
  uint64_t h = mix64((static_cast<uint64_t>(op_) << 32) ^ arity_);
  h = mix64(h ^ attr_);
  const Id* c = data();
  // Two children per mixing round: hashing is on the insertion path of every node.
  uint32_t i = 0;
  for (; i + 1 < arity_; i += 2) h = mix64(h ^ ((static_cast<uint64_t>(c[i]) << 32) | c[i + 1]));
  if (i < arity_) h = mix64(h ^ c[i] ^ 0x5bd1e995ULL);
  return h;
}

}  // namespace mn::egraph
