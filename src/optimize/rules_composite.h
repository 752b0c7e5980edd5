#pragma once
// Composite-op rules, derived from the op table: every op with a `decompose` gets
//
//  - "decompose-<op>": each e-node of the composite gets its decomposition (built by the op's own
//    decompose on the operands' types) added and merged into its class;
//  - "recognize-<op>": the primitive form is found and the composite node added to its class.
//    A structural pattern of the decomposition (from the op's samples: one pattern per distinct
//    structure, attributes and constants left open) finds candidates through the e-graph's
//    per-operator index; the composite's attributes are recovered from what was matched (see
//    rules_composite_attrs.h), and the candidate is kept only if the decomposition rebuilt with
//    them already exists in the e-graph, node for node, as the matched class (a lookup, no nodes
//    added). So recognition is exactly as sound as the decomposition: it never guesses.
//
// Pure rewrites: no per-iteration hooks are needed. Both rules keep memos (decomposed nodes,
// verified-and-failed candidates), so re-searching each iteration costs almost nothing.
//
// Recognized primitive forms (what the decompositions emit, so what hand-written models must
// spell exactly, operand order included; `c` is a scalar constant of x's dtype, i.e. `x + 1e-6`,
// axes are the normalized non-negative ones that sum/mean/max always store):
//   silu(x)        x * sigmoid(x)
//   sigmoid(x)     1 / (1 + exp(-x))
//   softmax(x, a)  e / sum(e, {a}, keepdims)          with e = exp(x - max(x, {a}, keepdims))
//   log_softmax    s - log(sum(exp(s), {a}, keepdims)) with s = x - max(x, {a}, keepdims)
//   rms_norm       (x * rsqrt(mean(x * x, trailing axes, keepdims) + eps)) [* gamma]
//   layer_norm     (xc * rsqrt(mean(xc * xc, trailing, keepdims) + eps)) [* gamma] [+ beta]
//                  with xc = x - mean(x, trailing axes, keepdims)
//   gelu exact     (0.5 * x) * (1 + erf(x / sqrt(2)))   (2 a scalar constant, sqrt an op)
//   gelu tanh      (0.5 * x) * (1 + tanh(k0 * (x + k1 * (x * x * x))))
//   scaled_dot_product_attention(q, k, v [, mask], causal, scale): with q [..., Hq, Lq, D] and
//                  k, v [..., Hkv, Lk, *] viewed grouped (G = Hq / Hkv):
//                    qg = reshape(q, [..., Hkv, G, Lq, D]); kg, vg = reshape(k|v, [..., Hkv, 1, Lk,
//                    *]) s  = matmul(qg, kg, false, true) * scale    (scale > 0)
//                       | matmul(qg, kg, false, true) / sqrt(D)  (default: D a scalar constant)
//                    s  = s + reshape(mask, grouped)             (with a mask)
//                    s  = where(tril ones [Lq, Lk] constant, s, -inf)   (causal)
//                    out = reshape(matmul(softmax form of s over the last axis, vg), [..., Hq, Lq,
//                    Dv])
//   mean, variance, and any other composite whose samples' attributes the structure decides
//   (cross_entropy, the losses, gelu...) the same way.
#include <vector>

#include "egraph/rewrite.h"
#include "optimize/tensor_egraph.h"

namespace mn::optimize {

struct CompositeRuleOptions {
  bool decompose = true;  // composite -> primitives
  bool recognize = true;  // primitives -> composite
};

// The rules refer to `teg`, which must outlive them.
std::vector<egraph::Rewrite> composite_rules(TensorEGraph& teg,
                                             const CompositeRuleOptions& options = {});

}  // namespace mn::optimize
