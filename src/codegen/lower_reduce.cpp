// Reductions (sum, mean, max, min, variance, argmax, sum_to) along any set of axes. Small
// reductions run one thread per output element; large ones one workgroup per output element
// with a shared-memory tree.
#include <numeric>

#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "ir/ops/common.h"
#include "ir/ops/reduce.h"

namespace mn::codegen {

namespace {

enum class Kind { sum, mean, max, min, variance, argmax };

struct Geometry {
  Shape kept_dims, kept_strides;        // output coordinates and their input strides
  Shape reduced_dims, reduced_strides;  // reduced coordinates and their input strides
  uint64_t outputs = 1, reduced = 1;
};

Geometry geometry(const Shape& in, const std::vector<int64_t>& axes) {
  Geometry g;
  auto strides = contiguous_strides(in);
  for (size_t d = 0; d < in.size(); ++d) {
    bool r = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    (r ? g.reduced_dims : g.kept_dims).push_back(in[d]);
    (r ? g.reduced_strides : g.kept_strides).push_back(strides[d]);
  }
  g.outputs = static_cast<uint64_t>(numel(g.kept_dims));
  g.reduced = static_cast<uint64_t>(numel(g.reduced_dims));
  return g;
}

// An offset expression: sum of coordinate <prefix>j times stride j.
std::string offset_expr(const Shape& strides, const std::string& prefix) {
  std::string s;
  for (size_t j = 0; j < strides.size(); ++j) {
    if (!s.empty()) s += " + ";
    s += prefix + std::to_string(j) + " * " + std::to_string(strides[j]) + "u";
  }
  return s.empty() ? "0u" : s;
}

std::string combine(Kind k, const std::string& acc, const std::string& v) {
  switch (k) {
    case Kind::max: return "((" + acc + " >= " + v + " || isnan(" + acc + ")) ? " + acc + " : " + v + ")";
    case Kind::min: return "((" + acc + " <= " + v + " || isnan(" + acc + ")) ? " + acc + " : " + v + ")";
    default: return acc + " + " + v;
  }
}

std::string init_value(Kind k) {
  switch (k) {
    case Kind::max: return "uintBitsToFloat(0xff800000u)";
    case Kind::min: return "uintBitsToFloat(0x7f800000u)";
    default: return "0.0";
  }
}

// The loop over reduced elements r = start, start+step, ... accumulating into `acc`;
// `value` maps the loaded x (a float named x) to what is accumulated.
std::string reduce_loop(const Geometry& g, Kind k, const std::string& start, const std::string& step,
                        const std::string& acc, const std::string& value) {
  std::string s = "  for (uint r = " + start + "; r < " + std::to_string(g.reduced) + "u; r += " + step + ") {\n";
  s += glsl::unravel(g.reduced_dims, "r", "r");
  s += "    float x = in_ld(base + " + offset_expr(g.reduced_strides, "r") + ");\n";
  s += "    " + acc + " = " + combine(k, acc, value) + ";\n  }\n";
  return s;
}

Lowering lower_reduction(const LowerContext& ctx, Kind kind, std::vector<int64_t> axes) {
  const Node& n = ctx.node;
  const Shape& in = ctx.inputs[0].shape;
  Geometry g = geometry(in, axes);
  const std::string N = std::to_string(g.reduced) + ".0";
  const bool group_per_output = g.reduced > 64 && !(g.outputs >= 8192 && g.reduced <= 512);
  const uint32_t local = group_per_output ? 256 : 128;

  std::string decl = glsl::buffer(0, ctx.inputs[0].dtype, "in", true);
  decl += glsl::buffer(1, n.type.dtype, "out", false);
  std::string body;
  if (!group_per_output) {
    body += "  uint o = gid();\n  if (o >= " + std::to_string(g.outputs) + "u) return;\n";
    body += glsl::unravel(g.kept_dims, "o", "k");
    body += "  uint base = " + offset_expr(g.kept_strides, "k") + ";\n";
    if (kind == Kind::argmax) {
      body += "  float best = uintBitsToFloat(0xff800000u); int besti = 0;\n";
      body += "  for (uint r = 0u; r < " + std::to_string(g.reduced) + "u; ++r) {\n";
      body += glsl::unravel(g.reduced_dims, "r", "r");
      body += "    float x = in_ld(base + " + offset_expr(g.reduced_strides, "r") + ");\n";
      body += "    if (x > best || (isnan(x) && !isnan(best))) { best = x; besti = int(r); }\n  }\n";
      body += "  out_sti(o, besti);\n";
    } else {
      body += "  float acc = " + init_value(kind) + ";\n";
      body += reduce_loop(g, kind, "0u", "1u", "acc", "x");
      if (kind == Kind::mean) body += "  acc /= " + N + ";\n";
      if (kind == Kind::variance) {
        body += "  float mean = acc / " + N + ";\n  float m2 = 0.0;\n";
        body += reduce_loop(g, Kind::sum, "0u", "1u", "m2", "(x - mean) * (x - mean)");
        body += "  acc = m2 / max(" + N + " - float(" +
                std::to_string(n.attrs.as<VarianceAttrs>().correction) + "), 0.0);\n";
      }
      body += "  out_st(o, acc);\n";
    }
    auto grid = glsl::linear_grid(g.outputs, ctx.device, local);
    KernelLaunch k{std::string(n.op_name()), glsl::header() + decl + glsl::gid_function() +
                                                  "void main() {\n" + body + "}\n",
                   {local, 1, 1}, grid.groups, {{ArgRef::input(0), false}, {ArgRef::output(), true}}};
    Lowering l;
    l.launches.push_back(std::move(k));
    return l;
  }

  const std::string L = std::to_string(local);
  decl += "shared float s_val[" + L + "];\nshared int s_idx[" + L + "];\n";
  body += "  uint o = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  body += "  uint lid = gl_LocalInvocationID.x;\n";
  body += "  if (o >= " + std::to_string(g.outputs) + "u) return;\n";  // uniform per group
  body += glsl::unravel(g.kept_dims, "o", "k");
  body += "  uint base = " + offset_expr(g.kept_strides, "k") + ";\n";
  auto tree = [&](Kind k) {
    std::string s = "  barrier();\n  for (uint s = " + std::to_string(local / 2) + "u; s > 0u; s >>= 1) {\n";
    s += "    if (lid < s) {\n";
    if (k == Kind::argmax) {
      s += "      float a = s_val[lid], b = s_val[lid + s]; int ia = s_idx[lid], ib = s_idx[lid + s];\n";
      s += "      if (b > a || (b == a && ib < ia) || (isnan(b) && !isnan(a)) || (isnan(a) && isnan(b) && ib < ia)) { s_val[lid] = b; s_idx[lid] = ib; }\n";
    } else {
      s += "      s_val[lid] = " + combine(k, "s_val[lid]", "s_val[lid + s]") + ";\n";
    }
    s += "    }\n    barrier();\n  }\n";
    return s;
  };
  if (kind == Kind::argmax) {
    body += "  float best = uintBitsToFloat(0xff800000u); int besti = 0x7fffffff;\n";
    body += "  for (uint r = lid; r < " + std::to_string(g.reduced) + "u; r += " + L + "u) {\n";
    body += glsl::unravel(g.reduced_dims, "r", "r");
    body += "    float x = in_ld(base + " + offset_expr(g.reduced_strides, "r") + ");\n";
    body += "    if (x > best || (isnan(x) && !isnan(best)) || besti == 0x7fffffff) { best = x; besti = int(r); }\n  }\n";
    body += "  s_val[lid] = best; s_idx[lid] = besti;\n" + tree(Kind::argmax);
    body += "  if (lid == 0u) out_sti(o, s_idx[0]);\n";
  } else {
    body += "  float acc = " + init_value(kind) + ";\n";
    body += reduce_loop(g, kind, "lid", L + "u", "acc", "x");
    body += "  s_val[lid] = acc;\n" + tree(kind == Kind::mean || kind == Kind::variance ? Kind::sum : kind);
    if (kind == Kind::variance) {
      body += "  float mean = s_val[0] / " + N + ";\n  barrier();\n  float m2 = 0.0;\n";
      body += reduce_loop(g, Kind::sum, "lid", L + "u", "m2", "(x - mean) * (x - mean)");
      body += "  s_val[lid] = m2;\n" + tree(Kind::sum);
      body += "  if (lid == 0u) out_st(o, s_val[0] / max(" + N + " - float(" +
              std::to_string(n.attrs.as<VarianceAttrs>().correction) + "), 0.0));\n";
    } else if (kind == Kind::mean) {
      body += "  if (lid == 0u) out_st(o, s_val[0] / " + N + ");\n";
    } else {
      body += "  if (lid == 0u) out_st(o, s_val[0]);\n";
    }
  }
  auto grid = glsl::linear_grid(g.outputs * local, ctx.device, local);
  KernelLaunch k{std::string(n.op_name()),
                 glsl::header() + decl + "void main() {\n" + body + "}\n",
                 {local, 1, 1}, grid.groups, {{ArgRef::input(0), false}, {ArgRef::output(), true}}};
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

std::vector<int64_t> axes_of(const LowerContext& ctx, const std::vector<int64_t>& axes) {
  return ops::normalize_axes(axes, ctx.inputs[0].rank(), ctx.node.op_name());
}

}  // namespace

void register_reduce_lowerings(LoweringRegistry& r) {
  auto reduce = [](Kind k) {
    return [k](const LowerContext& ctx) {
      return lower_reduction(ctx, k, axes_of(ctx, ctx.node.attrs.as<ReduceAttrs>().axes));
    };
  };
  r.add("sum", reduce(Kind::sum));
  r.add("mean", reduce(Kind::mean));
  r.add("max", reduce(Kind::max));
  r.add("min", reduce(Kind::min));
  r.add("variance", [](const LowerContext& ctx) {
    return lower_reduction(ctx, Kind::variance, axes_of(ctx, ctx.node.attrs.as<VarianceAttrs>().axes));
  });
  r.add("argmax", [](const LowerContext& ctx) {
    int64_t axis = ctx.node.attrs.as<ArgmaxAttrs>().axis;
    return lower_reduction(ctx, Kind::argmax, axes_of(ctx, {axis}));
  });
  r.add("sum_to", [](const LowerContext& ctx) {
    // Reduce the leading extra axes and the axes the target holds as 1.
    const Shape& in = ctx.inputs[0].shape;
    const Shape& target = ctx.node.type.shape;
    std::vector<int64_t> axes;
    const size_t lead = in.size() - target.size();
    for (size_t d = 0; d < in.size(); ++d) {
      if (d < lead || (target[d - lead] == 1 && in[d] != 1)) axes.push_back(static_cast<int64_t>(d));
    }
    if (axes.empty()) {
      Lowering l;
      l.alias_input0 = true;
      return l;
    }
    return lower_reduction(ctx, Kind::sum, axes);
  });
}

}  // namespace mn::codegen
