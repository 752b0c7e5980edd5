#pragma once
// Compiled e-matching (after egg's machine): a pattern becomes a short program over registers
// holding class ids. `bind` enumerates the nodes of a register's class with a given operator
// (class nodes are sorted by operator, so this is a binary search and a short scan) and writes
// their children to fresh registers; `compare` enforces a repeated variable; `lookup` checks a
// ground subterm against its class, found once per search through the hash-cons.
//
// The root operator is not scanned class by class: the search walks the e-graph's per-operator
// node index, so a rule costs time proportional to the nodes of its root operator only.
#include <cstddef>
#include <limits>
#include <vector>

#include "egraph/egraph.h"
#include "egraph/matches.h"
#include "egraph/pattern.h"

namespace mn::egraph {

class CompiledPattern {
 public:
  explicit CompiledPattern(const Pattern& pattern);

  // Appends the matches in `egraph` (which must be clean) to `out`, stopping once `out` holds
  // `limit` matches. `out` must have been reset() for this pattern's variable counts.
  void search(const EGraph& egraph, SearchMatches& out,
              size_t limit = std::numeric_limits<size_t>::max()) const;
  // The matches rooted at class `cls` only.
  void search_class(const EGraph& egraph, Id cls, SearchMatches& out,
                    size_t limit = std::numeric_limits<size_t>::max()) const;

  uint32_t num_vars() const { return num_vars_; }
  uint32_t num_attr_vars() const { return num_attr_vars_; }
  // The root operator, or no_op when the pattern is a bare variable (matches every class).
  static constexpr OpId no_op = std::numeric_limits<OpId>::max();
  OpId root_op() const { return var_root_ ? no_op : instrs_[0].op; }
  size_t num_instructions() const { return instrs_.size(); }

 private:
  enum class Kind : uint8_t { bind, compare, lookup };
  enum class AttrOp : uint8_t { any, equal, bind, check };
  struct Instr {
    Kind kind = Kind::bind;
    AttrOp attr_op = AttrOp::any;
    uint32_t reg = 0;    // bind/lookup: the class register; compare: one side
    uint32_t other = 0;  // bind: first output register; compare: other side; lookup: ground term
    OpId op = 0;
    uint32_t arity = 0;
    uint32_t attr_var = 0;
    int32_t test = -1;  // index into tests_
    Attr value = 0;
  };
  struct Ground {
    OpId op;
    Attr attr;
    std::vector<uint32_t> children;  // indices of earlier ground terms
  };
  struct State;

  uint32_t ground_index(const Pattern& p, Pattern::Ref r);
  bool head_matches(const Instr& in, const ENode& node, State& st) const;
  bool run(size_t pc, State& st) const;
  bool yield(State& st) const;
  bool start(const EGraph& egraph, State& st) const;

  std::vector<Instr> instrs_;
  std::vector<Ground> ground_;
  std::vector<AttrPredicate> tests_;
  std::vector<uint32_t> var_regs_;
  uint32_t num_regs_ = 1;
  uint32_t num_vars_ = 0;
  uint32_t num_attr_vars_ = 0;
  bool var_root_ = false;
};

}  // namespace mn::egraph
