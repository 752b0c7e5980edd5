#pragma once
// The hash-cons (egg's memo): canonical e-node -> the id of the e-node holding it. Slots store
// only the node id and 32 bits of its hash; keys are compared against the e-graph's node store,
// so each e-node is stored once and a slot is 8 bytes. Open addressing, linear probing,
// backward-shift deletion (no tombstones), load factor at most 1/2.
#include <vector>

#include "egraph/enode.h"

namespace mn::egraph {

class HashCons {
 public:
  // The id whose node equals `key` (hash `hash`), or no_id.
  Id find(const ENode& key, uint32_t hash, const std::vector<ENode>& nodes) const;
  // `id` must not be present; its node's current hash is `hash`.
  void insert(Id id, uint32_t hash);
  // Removes `id`, stored under `hash`, if present.
  void erase(Id id, uint32_t hash);
  bool contains(Id id, uint32_t hash) const;
  size_t size() const { return size_; }
  void reserve(size_t n);

 private:
  struct Slot {
    Id id = no_id;
    uint32_t hash = 0;
  };
  void rehash(size_t capacity);

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace mn::egraph
