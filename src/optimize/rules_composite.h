#pragma once
// Composite-op rules, derived from the op table: every op with a `decompose` gets
//
//  - "decompose-<op>": each e-node of the composite gets its decomposition (built by the op's own
//    decompose on the operands' types in a scratch graph, then copied in) merged into its class;
//  - "recognize-<op>": the primitive form is found and the composite node added to its class.
//    Structural patterns of the decomposition (built from the op's samples, one per distinct
//    structure, attributes and constants left open; see rules_composite_template.h) find
//    candidates through the e-graph's per-operator index. The composite's attributes are
//    recovered from the matched words and constants (rules_composite_attrs.h: softmax axis,
//    eps, normalized_dims, attention scale, rope theta/offset...; other ops try their samples'
//    attributes), and a candidate is kept only if the decomposition rebuilt with them already
//    exists in the e-graph, node for node, as the matched class (lookups only, nothing added).
//    So recognition is exactly as sound as the decomposition: it never guesses.
//
// Pure rewrites, no per-iteration hooks: both rules keep memos (decomposed nodes; matches that
// failed verification, retried once their class gains nodes), so re-searching each iteration is
// cheap. Measured on a 30-layer transformer training step (7.2k graph nodes): 24 ms to saturate.
//
// Recognized primitive forms: exactly what the decompositions emit, so what hand-written models
// must spell, operand order included, except that the outermost add/mul may have its operands
// either way round. `c` is a scalar constant of x's dtype (`x + 1e-6` makes one); reduction axes
// are the non-negative ones sum/mean/max always store, so {-1} is fine.
//   silu(x)        x * sigmoid(x)
//   sigmoid(x)     1 / (1 + exp(-x))
//   softmax(x, a)  e / sum(e, {a}, true)                with e = exp(x - max(x, {a}, true))
//   log_softmax    s - log(sum(exp(s), {a}, true))      with s = x - max(x, {a}, true)
//   rms_norm       x * rsqrt(mean(x * x, trailing axes, true) + eps)  [* gamma]
//   layer_norm     xc * rsqrt(mean(xc * xc, trailing axes, true) + eps)  [* gamma] [+ beta]
//                  with xc = x - mean(x, trailing axes, true)
//   gelu exact     (0.5 * x) * (1 + erf(x / sqrt(2)))   (2 a scalar constant, sqrt an op)
//   gelu tanh      (0.5 * x) * (1 + tanh(k0 * (x + k1 * (x * x * x))))  (k0, k1 as in the table)
//   scaled_dot_product_attention(q, k, v [, mask], causal, scale), q [..., Hq, Lq, D] and
//                  k, v [..., Hkv, Lk, *] viewed grouped (G = Hq / Hkv):
//                    qg = reshape(q, [..., Hkv, G, Lq, D])
//                    kg = reshape(k, [..., Hkv, 1, Lk, D]), vg likewise
//                    s = matmul(qg, kg, false, true) * scale    (explicit scale)
//                      | matmul(qg, kg, false, true) / sqrt(D)  (default; D a scalar constant)
//                    s = s + reshape(mask, grouped)             (with a mask)
//                    s = where(keep, s, -inf)     (causal; keep [Lq, Lk] constant, 1 for j <= i)
//                    p = softmax form of s on the last axis
//                    out = reshape(matmul(p, vg), [..., Hq, Lq, Dv])
//   rope(x, theta, offset)  x * concat({c, c}, -1) + concat({-x2, x1}, -1) * concat({s, s}, -1)
//                  with x1, x2 the halves of the last axis (slices), c, s = cos, sin of
//                  positions [L, 1] constant * (1 / pow(theta, two_i [1, D/2] constant / D))
//   rope_backward  rope's gradient as autodiff writes it: with gs = g * concat({s, s}, -1),
//                  (g * concat({c, c}, -1) + pad(gs2, after D/2)) + pad(-gs1, before D/2)
//   cross_entropy  log_softmax form + nll_loss (class indices) or -sum(log_softmax * t)
//   mean, variance, the losses, transpose, split, group/batch norm: their decompositions, with
//                  the attributes recovered (mean, variance) or one of their samples'.
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
