#pragma once
// How large the terms behind each output element are, estimated on the float64 reference by
// perturbation: every float input, and the result of every op, is multiplied by 1 + ρ·s with s
// random in [-1, 1] (the rounding an f32 kernel applies to each value it computes, at a tiny
// scale), and the outputs' change divided by ρ is the element's sensitivity to those roundings
// (Monte Carlo arithmetic). An f32 kernel's error is a few f32 rounding units of it: small for
// a well-conditioned element, large for one that cancels (a gradient of a normalization, a
// variance of values far from zero). elementwise_near takes it as `terms`.
#include <map>
#include <string>

#include <meganeura/array.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

namespace mn::testing {

// Per output of `g` (by name), the element's sensitivity estimate: the largest over `trials`
// random perturbations of |Δy| / ρ. Integer values are left as they are.
std::map<std::string, Array> conditioning(const Graph& g, const reference::Feeds& feeds,
                                          int trials = 2);

}  // namespace mn::testing
