#pragma once
// The attention problem the training-kernel GPU tests share: q, k, v and dout of the given
// sizes (an optional [Lq, Lk] additive mask), the attention and its gradients of q, k and v in
// one graph (outputs "out", "dq", "dk", "dv"), and random feeds seeded by the label.
#include <cstdint>
#include <ostream>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/reference.h>

namespace mn::testing {

struct AttentionCase {
  std::string label;
  int64_t batch, hq, hkv, lq, lk, d, dv;
  bool causal, mask;
  DType dtype = DType::f32;
};
inline void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.label; }

struct AttentionProblem {
  Graph graph;
  reference::Feeds feeds;
  int grad_ops = 0;  // attention_grad_* nodes among the gradients
};

// `seed_prefix` + the label seeds the feeds: q, k, v, dout uniform in [-1, 1], the mask in
// [-2, 0].
AttentionProblem attention_problem(const AttentionCase& c, const std::string& seed_prefix);

}  // namespace mn::testing
