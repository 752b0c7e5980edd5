#pragma once
// The small integer names the e-graph engine works with. The engine knows nothing about what
// an operator means: operators are small integers chosen by the client, and attributes are one
// opaque 64-bit word (a literal value, or an index into a table the client owns).
#include <cstdint>
#include <limits>

namespace mn::egraph {

// An e-class id. Every e-node ever added created a class, and is named by that class's id, so
// the same type also names e-nodes (see EGraph::node).
using Id = uint32_t;
inline constexpr Id no_id = std::numeric_limits<Id>::max();

// An operator: a small dense integer (SymbolTable interns names to them).
using OpId = uint32_t;

// An e-node's attribute payload. Two e-nodes are equal only when their words are equal, so a
// client with rich attributes interns them (AttrTable) and stores the index.
using Attr = uint64_t;

// splitmix64's finalizer: cheap and mixes every input bit into every output bit, which the
// open-addressing tables rely on (they index with the low bits).
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace mn::egraph
