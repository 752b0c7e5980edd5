#pragma once
// Patterns and terms written as s-expressions: "(* ?x (/ 2 2))". Atoms are resolved to
// (operator, attribute) by the caller, who decides what "2" or "x" means; "?name" is a pattern
// variable. Meant for tests and hand-written rule tables; malformed text is an mn::Error with
// the offset.
#include <functional>
#include <string_view>

#include "egraph/egraph.h"
#include "egraph/pattern.h"

namespace mn::egraph {

struct OpRef {
  OpId op = 0;
  Attr attr = 0;
};
// The operator and attribute a token stands for, given how many children it has.
using OpResolver = std::function<OpRef(std::string_view token, size_t arity)>;

Pattern parse_pattern(std::string_view text, const OpResolver& resolve);
// Adds the term to the e-graph; returns its class.
Id add_sexpr(EGraph& egraph, std::string_view text, const OpResolver& resolve);

}  // namespace mn::egraph
