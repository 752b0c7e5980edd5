// Shape ops on the GPU. Pure reinterpretations of contiguous data (reshape, squeeze, unsqueeze)
// alias their input; everything else is a gather with one thread per output element, so the
// writes are coalesced: permute/transpose/broadcast_to/slice/split read through per-axis
// strides, pad/unslice place the input inside a constant frame, concat picks its operand by
// position along the axis.
#include "codegen/lower_shape.h"

#include <algorithm>
#include <numeric>

#include "codegen/glsl.h"
#include "codegen/index_check.h"
#include "codegen/lower_families.h"
#include "ir/ops/shape.h"

namespace mn::codegen {

namespace shape_lowering {

std::string copy_to_out(DType t, const std::string& src, const std::string& index,
                        const std::string& dst) {
  const std::string s = is_float(t) ? "" : "i";
  return "  out_st" + s + "(" + dst + ", " + src + "_ld" + s + "(" + index + "));\n";
}

std::string store_constant(DType t, double value) {
  switch (t) {
    case DType::i32:
      return "  out_sti(i, " + std::to_string(static_cast<int32_t>(value)) + ");\n";
    case DType::u32:
      // int(uint) keeps the bits, and out_sti converts back with uint().
      return "  out_sti(i, int(" + std::to_string(static_cast<uint32_t>(value)) + "u));\n";
    default:
      return "  out_st(i, " + glsl::float_literal(value) + ");\n";
  }
}

KernelLaunch per_element(const LowerContext& ctx, std::string name, const std::vector<int>& inputs,
                         const std::string& body, uint64_t n, bool index_slot,
                         const std::string& declarations) {
  std::string decl;
  std::vector<KernelBinding> bindings;
  for (size_t b = 0; b < inputs.size(); ++b) {
    decl += glsl::buffer(static_cast<uint32_t>(b), ctx.inputs[inputs[b]].dtype,
                         "in" + std::to_string(b), true);
    bindings.push_back({ArgRef::input(inputs[b]), false});
  }
  decl += glsl::buffer(static_cast<uint32_t>(inputs.size()), ctx.node.type.dtype, "out", false);
  bindings.push_back({ArgRef::output(), true});
  if (index_slot && ctx.check_indices) {
    decl += index_slot_glsl(static_cast<uint32_t>(bindings.size()));
    bindings.push_back(index_slot_binding());
  }
  decl += declarations;
  return glsl::elementwise_launch(std::move(name), decl, body, n, ctx.device, std::move(bindings));
}

}  // namespace shape_lowering

namespace {

using namespace shape_lowering;
using namespace ops::shape_detail;

using glsl::ulit;

// `term * stride` as GLSL, or nothing for a zero stride.
void add_term(std::string& sum, const std::string& term, int64_t stride) {
  if (stride == 0) return;
  if (!sum.empty()) sum += " + ";
  sum += stride == 1 ? term : term + " * " + ulit(stride);
}

Lowering single(KernelLaunch k) {
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

Lowering alias() {
  Lowering l;
  l.alias_input0 = true;
  return l;
}

// out[c] = x[base + sum_d c_d * strides[d]] over the output's coordinates c.
Lowering strided_gather(const LowerContext& ctx, const Shape& strides, int64_t base) {
  const Shape& out = ctx.node.type.shape;
  // Fewer index divisions: drop size-1 axes and merge neighbours the input walks contiguously
  // (a slice of the last axis keeps one division, a broadcast row none).
  Shape dims, st;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (!dims.empty() && st.back() == strides[d] * out[d]) {
      dims.back() *= out[d];
      st.back() = strides[d];
    } else {
      dims.push_back(out[d]);
      st.push_back(strides[d]);
    }
  }
  std::string offset = base != 0 ? ulit(base) : "";
  std::string body;
  if (dims.size() == 1) {
    add_term(offset, "i", st[0]);
  } else {
    body += glsl::unravel(dims, "i", "c");
    for (size_t d = 0; d < dims.size(); ++d) add_term(offset, "c" + std::to_string(d), st[d]);
  }
  if (offset.empty()) offset = "0u";
  body += copy_to_out(ctx.node.type.dtype, "in0", offset);
  return single(per_element(ctx, std::string(ctx.node.op_name()), {0}, body,
                            static_cast<uint64_t>(ctx.node.type.numel())));
}

Lowering lower_permute(const LowerContext& ctx, const std::vector<int64_t>& perm) {
  const Shape xs = contiguous_strides(ctx.inputs[0].shape);
  Shape strides(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) strides[d] = xs[perm[d]];
  return strided_gather(ctx, strides, 0);
}

Lowering lower_broadcast_to(const LowerContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  const Shape& out = ctx.node.type.shape;
  if (in == out) return alias();
  const Shape xs = contiguous_strides(in);
  const size_t lead = out.size() - in.size();
  Shape strides(out.size(), 0);
  for (size_t d = 0; d < in.size(); ++d) strides[lead + d] = in[d] == 1 ? 0 : xs[d];
  return strided_gather(ctx, strides, 0);
}

// x read along `axis` from element `start` by `step`: slice and split.
Lowering lower_axis_range(const LowerContext& ctx, int64_t axis, int64_t start, int64_t step) {
  Shape strides = contiguous_strides(ctx.inputs[0].shape);
  const int64_t base = start * strides[axis];
  strides[axis] *= step;
  return strided_gather(ctx, strides, base);
}

// Where each output axis finds the input: in[(c - start) / step] when c - start is a multiple
// of step below size * step, else the fill value.
struct Placement {
  int64_t out = 1;    // output extent
  int64_t size = 1;   // input extent
  int64_t start = 0;  // first output coordinate holding input
  int64_t step = 1;
  bool full() const { return start == 0 && step == 1 && size == out; }
};

// The constant frame around the input (pad), or the input spread by a step (unslice).
Lowering placed_copy(const LowerContext& ctx, const std::vector<Placement>& axes, double fill) {
  // Merge runs of full axes (contiguous in both tensors) and drop size-1 ones.
  std::vector<Placement> dims;
  for (const Placement& a : axes) {
    if (a.out == 1) continue;
    if (a.full() && !dims.empty() && dims.back().full()) {
      dims.back().out *= a.out;
      dims.back().size *= a.size;
    } else {
      dims.push_back(a);
    }
  }
  Shape out_dims, in_dims;
  for (const Placement& a : dims) {
    out_dims.push_back(a.out);
    in_dims.push_back(a.size);
  }
  const Shape in_strides = contiguous_strides(in_dims);
  std::string body = glsl::unravel(out_dims, "i", "c");
  std::string inside, offset;
  auto all = [&inside](const std::string& cond) {
    inside += (inside.empty() ? "" : " && ") + cond;
  };
  for (size_t d = 0; d < dims.size(); ++d) {
    const Placement& a = dims[d];
    const std::string c = "c" + std::to_string(d);
    if (a.full()) {
      add_term(offset, c, in_strides[d]);
      continue;
    }
    // Unsigned wrap-around below start fails the upper-bound test, so one comparison covers
    // both sides.
    const std::string rel = a.start == 0 ? c : "(" + c + " - " + ulit(a.start) + ")";
    if (a.step == 1) {
      all(rel + " < " + ulit(a.size));
      add_term(offset, rel, in_strides[d]);
    } else {
      all(rel + " < " + ulit(a.size * a.step));
      all(rel + " % " + ulit(a.step) + " == 0u");
      add_term(offset, "(" + rel + " / " + ulit(a.step) + ")", in_strides[d]);
    }
  }
  if (offset.empty()) offset = "0u";
  const DType t = ctx.node.type.dtype;
  if (inside.empty()) {
    body += copy_to_out(t, "in0", offset);
  } else {
    body += "  if (" + inside + ") {\n  " + copy_to_out(t, "in0", offset) + "  } else {\n  " +
            store_constant(t, fill) + "  }\n";
  }
  return single(per_element(ctx, std::string(ctx.node.op_name()), {0}, body,
                            static_cast<uint64_t>(ctx.node.type.numel())));
}

Lowering lower_pad(const LowerContext& ctx) {
  const PadAttrs p = resolve_pad("pad", ctx.inputs, ctx.node.attrs.as<PadAttrs>());
  const Shape& in = ctx.inputs[0].shape;
  std::vector<Placement> axes;
  for (size_t d = 0; d < in.size(); ++d) {
    axes.push_back({in[d] + p.before[d] + p.after[d], in[d], p.before[d], 1});
  }
  return placed_copy(ctx, axes, round_to_dtype(p.value, ctx.node.type.dtype));
}

Lowering lower_unslice(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<UnsliceAttrs>();
  const Shape& in = ctx.inputs[0].shape;
  const int64_t axis = axis_in("unslice", ctx.inputs, a.axis, ctx.inputs[0].rank());
  std::vector<Placement> axes;
  for (size_t d = 0; d < in.size(); ++d) axes.push_back({in[d], in[d], 0, 1});
  axes[axis] = {a.size, in[axis], a.start, a.step};
  return placed_copy(ctx, axes, 0.0);
}

// Descriptor sets stay within every device's per-stage limit of storage buffers.
constexpr size_t kConcatInputsPerLaunch = 7;

// Each output row (everything before the axis) is the operands' rows one after another; a
// launch covers the consecutive span of its group of operands in every row.
Lowering lower_concat(const LowerContext& ctx) {
  const Shape& out = ctx.node.type.shape;
  const int axis =
      normalize_axis(ctx.node.attrs.as<ConcatAttrs>().axis, static_cast<int>(out.size()), "concat");
  const AxisSplit s = split_at(out, axis);
  const int64_t row = s.n * s.inner;  // output elements per outer index
  std::vector<int64_t> begin{0};      // operand m fills [begin[m], begin[m + 1]) of a row
  for (const TensorType& t : ctx.inputs) begin.push_back(begin.back() + t.shape[axis] * s.inner);

  const DType t = ctx.node.type.dtype;
  Lowering l;
  for (size_t m0 = 0; m0 < ctx.inputs.size(); m0 += kConcatInputsPerLaunch) {
    const size_t m1 = std::min(ctx.inputs.size(), m0 + kConcatInputsPerLaunch);
    const int64_t span = begin[m1] - begin[m0];
    std::string body;
    // o: outer index, q: position within the output row.
    if (s.outer == 1) {
      body += "  uint o = 0u;\n  uint q = i + " + ulit(begin[m0]) + ";\n";
    } else {
      body += "  uint o = i / " + ulit(span) + ";\n  uint q = i % " + ulit(span) + " + " +
              ulit(begin[m0]) + ";\n";
    }
    // The group's threads cover only its span of each row: write at the row position.
    body += "  uint dst = o * " + ulit(row) + " + q;\n";
    std::vector<int> inputs;
    for (size_t m = m0; m < m1; ++m) {
      const int b = static_cast<int>(m - m0);
      inputs.push_back(static_cast<int>(m));
      const int64_t len = begin[m + 1] - begin[m];
      const std::string src = "o * " + ulit(len) + " + q - " + ulit(begin[m]);
      const std::string copy = copy_to_out(t, "in" + std::to_string(b), src, "dst");
      if (m + 1 == m1) {
        body += m == m0 ? copy : "  else {\n  " + copy + "  }\n";
      } else {
        body += std::string(m == m0 ? "  if" : "  else if") + " (q < " + ulit(begin[m + 1]) +
                ") {\n  " + copy + "  }\n";
      }
    }
    KernelLaunch k =
        per_element(ctx, "concat", inputs, body, static_cast<uint64_t>(s.outer * span));
    l.launches.push_back(std::move(k));
  }
  return l;
}

}  // namespace

void register_shape_lowerings(LoweringRegistry& r) {
  // Contiguous data in a new shape: the same bytes.
  r.add("reshape", [](const LowerContext&) { return alias(); });
  r.add("squeeze", [](const LowerContext&) { return alias(); });
  r.add("unsqueeze", [](const LowerContext&) { return alias(); });
  r.add("permute", [](const LowerContext& ctx) {
    return lower_permute(
        ctx, resolve_perm("permute", ctx.inputs, ctx.node.attrs.as<PermuteAttrs>().perm));
  });
  r.add("transpose", [](const LowerContext& ctx) {
    const auto& a = ctx.node.attrs.as<TransposeAttrs>();
    const int rank = ctx.inputs[0].rank();
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[axis_in("transpose", ctx.inputs, a.axis0, rank)],
              perm[axis_in("transpose", ctx.inputs, a.axis1, rank)]);
    return lower_permute(ctx, perm);
  });
  r.add("broadcast_to", lower_broadcast_to);
  r.add("slice", [](const LowerContext& ctx) {
    const SliceAttrs s = resolve_slice("slice", ctx.inputs, ctx.node.attrs.as<SliceAttrs>());
    return lower_axis_range(ctx, s.axis, s.start, s.step);
  });
  r.add("split", [](const LowerContext& ctx) {
    const auto& a = ctx.node.attrs.as<SplitAttrs>();
    const int64_t axis = axis_in("split", ctx.inputs, a.axis, ctx.inputs[0].rank());
    int64_t offset = 0;
    for (int64_t i = 0; i < a.index; ++i) offset += a.sizes.at(static_cast<size_t>(i));
    return lower_axis_range(ctx, axis, offset, 1);
  });
  r.add("pad", lower_pad);
  r.add("unslice", lower_unslice);
  r.add("concat", lower_concat);
  register_shape_index_lowerings(r);
}

}  // namespace mn::codegen
