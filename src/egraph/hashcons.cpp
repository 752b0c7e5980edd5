#include "egraph/hashcons.h"

#include <bit>

namespace mn::egraph {

Id HashCons::find(const ENode& key, uint32_t hash, const std::vector<ENode>& nodes) const {
  if (slots_.empty()) return no_id;
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.id == no_id) return no_id;
    if (s.hash == hash && nodes[s.id] == key) return s.id;
  }
}

bool HashCons::contains(Id id, uint32_t hash) const {
  if (slots_.empty()) return false;
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    if (slots_[i].id == no_id) return false;
    if (slots_[i].id == id) return true;
  }
}

void HashCons::reserve(size_t n) {
  if (2 * n > slots_.size()) rehash(std::bit_ceil(std::max<size_t>(16, 2 * n)));
}

void HashCons::rehash(size_t capacity) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (const Slot& s : old) {
    if (s.id == no_id) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].id != no_id) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void HashCons::insert(Id id, uint32_t hash) {
  if (2 * (size_ + 1) > slots_.size()) rehash(std::max<size_t>(16, 2 * slots_.size()));
  size_t i = hash & mask_;
  while (slots_[i].id != no_id) i = (i + 1) & mask_;
  slots_[i] = Slot{id, hash};
  ++size_;
}

void HashCons::erase(Id id, uint32_t hash) {
  if (slots_.empty()) return;
  size_t i = hash & mask_;
  while (slots_[i].id != id) {
    if (slots_[i].id == no_id) return;  // absent: nothing to erase
    i = (i + 1) & mask_;
  }
  // Backward shift: pull later entries of the probe run into the hole unless that would move
  // one before its home slot.
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    if (slots_[j].id == no_id) break;
    size_t home = slots_[j].hash & mask_;
    bool movable = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
  --size_;
}

}  // namespace mn::egraph
