#pragma once
// The algebra rules of the optimizer: identities (x·1, x+0, neg∘neg, identity views), view and
// permutation chains, transposes folded into matmul flags, broadcasts an elementwise op does
// anyway, and constant chains. Every rule keeps the matched class's type: a right-hand side of
// any other type is skipped, never merged.
//
// No general commutativity or associativity: constants move right and constant chains fold,
// which is what the gradient graphs need, without the blow-up of full AC rewriting.
#include <vector>

#include "egraph/rewrite.h"
#include "optimize/tensor_egraph.h"

namespace mn::optimize {

// The rules refer to `teg`, which must outlive them.
std::vector<egraph::Rewrite> algebra_rules(TensorEGraph& teg);

}  // namespace mn::optimize
