// Reductions (sum, mean, max, min, variance, argmax, sum_to) along any set of axes.
//
// The input is seen as alternating kept and reduced axes (adjacent axes of the same kind merge,
// size-1 axes drop out). A workgroup is lx × ly threads: lx neighbouring outputs, ly lanes
// splitting each output's reduced elements, combined by a shared-memory tree. The shape picks
// lx and ly so that loads are coalesced: when the innermost axis is reduced (rows), the ly
// lanes read consecutive elements of a row; when it is kept (columns), the lx threads read
// consecutive outputs. When that grid is too small to fill a device and each lane would loop
// long, the reduced range splits into chunks: a first launch writes one partial per (chunk,
// output) to scratch, a second combines them (Chan's formula for variance).
//
// Floats accumulate in f32 whatever their storage; integers stay int (i32) or uint (u32).
// max/min propagate NaN and argmax picks the first maximum with NaN the largest, as the
// reference does.
#include <algorithm>
#include <bit>

#include "codegen/fused_reduce.h"
#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "ir/ops/common.h"
#include "ir/ops/reduce.h"

namespace mn::codegen {

namespace {

enum class Kind { sum, mean, max, min, variance, argmax };
enum class Value { f, i, u };  // f32 arithmetic, int, uint

struct Geometry {
  Shape kept_dims, kept_strides;        // output coordinates and their input strides
  Shape reduced_dims, reduced_strides;  // reduced coordinates and their input strides
  uint64_t outputs = 1, reduced = 1;
  bool inner_reduced = true;  // the input's innermost (non-1) axis is reduced
};

Geometry geometry(const Shape& in, const std::vector<int64_t>& axes) {
  struct Axis {
    int64_t extent, stride;
    bool reduced;
  };
  std::vector<Axis> merged;
  auto strides = contiguous_strides(in);
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    const bool r = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (!merged.empty() && merged.back().reduced == r) {
      merged.back().extent *= in[d];  // contiguous: the outer stride is extent × inner stride
      merged.back().stride = strides[d];
    } else {
      merged.push_back({in[d], strides[d], r});
    }
  }
  Geometry g;
  for (const Axis& a : merged) {
    (a.reduced ? g.reduced_dims : g.kept_dims).push_back(a.extent);
    (a.reduced ? g.reduced_strides : g.kept_strides).push_back(a.stride);
  }
  g.outputs = static_cast<uint64_t>(numel(g.kept_dims));
  g.reduced = static_cast<uint64_t>(numel(g.reduced_dims));
  g.inner_reduced = merged.empty() || merged.back().reduced;
  return g;
}

// An offset expression: sum of coordinate <prefix>j times stride j.
std::string offset_expr(const Shape& strides, const std::string& prefix) {
  std::string s;
  for (size_t j = 0; j < strides.size(); ++j) {
    if (!s.empty()) s += " + ";
    s += prefix + std::to_string(j);
    if (strides[j] != 1) s += " * " + std::to_string(strides[j]) + "u";
  }
  return s.empty() ? "0u" : s;
}

using glsl::ulit;

// The launch shape: lx outputs × ly lanes per group, the reduced range cut into `split` chunks
// of `chunk` elements.
struct Layout {
  uint32_t lx = 1, ly = 1;
  uint64_t split = 1, chunk = 1;
  uint64_t blocks = 1;  // groups along the outputs
};

Layout layout_for(const Geometry& g, const DeviceTraits& d) {
  Layout l;
  const auto pow2 = [](uint64_t v) { return static_cast<uint32_t>(std::bit_ceil(v)); };
  // 256 threads a group, fewer on devices that allow fewer (Vulkan guarantees 128).
  const uint32_t threads = std::min<uint32_t>(256, std::bit_floor(d.max_workgroup_invocations));
  if (g.inner_reduced) {
    // Rows: lanes along the row, ~4 elements each (fewer lanes would leave too little in
    // flight, more would spend the time in the tree); short rows share a group.
    if (g.reduced <= 8) {
      l.lx = threads / 2;
    } else {
      l.ly = std::min<uint32_t>(threads, std::max<uint32_t>(8, pow2(g.reduced) / 4));
      l.lx = threads / l.ly;
    }
  } else if (g.reduced <= 16 || (g.outputs >= 8192 && g.reduced <= 256)) {
    l.lx = threads / 2;  // columns, enough outputs: one thread each, reading consecutive addresses
  } else {
    l.lx = std::min<uint32_t>(32, pow2(g.outputs));
    l.ly = std::min<uint32_t>(threads / l.lx, pow2(g.reduced));
  }
  l.blocks = (g.outputs + l.lx - 1) / l.lx;
  // Split long reductions when the grid is too small to keep a large device's memory busy:
  // aim at ~2048 groups, each lane still loading >= 16 elements, and at most 256 partials for
  // the second launch's one thread per output to combine. Measured on an H200 (f32, 16M
  // elements): rows 2.9 TB/s, columns 2.8 TB/s, all to one 1.7 TB/s.
  const uint64_t per_lane = (g.reduced + l.ly - 1) / l.ly;
  if (l.blocks < 1024 && per_lane >= 64) {
    const uint64_t s = std::min<uint64_t>({(2048 + l.blocks - 1) / l.blocks, per_lane / 16, 256});
    l.chunk = (g.reduced + s - 1) / s;
    l.split = (g.reduced + l.chunk - 1) / l.chunk;
  }
  if (l.split <= 1) {
    l.split = 1;
    l.chunk = g.reduced;
  }
  return l;
}

// GLSL of one reduction kind over one value type: the accumulator type T, its identity, the
// combination, loads/stores, and the partials' encoding in the uint scratch buffer.
struct Reducer {
  Kind kind;
  Value value;

  std::string type() const {
    return value == Value::f ? "float" : value == Value::i ? "int" : "uint";
  }
  std::string identity() const {
    switch (kind) {
      case Kind::max:
        return value == Value::f   ? "uintBitsToFloat(0xff800000u)"
               : value == Value::i ? "(-2147483647 - 1)"
                                   : "0u";
      case Kind::min:
        return value == Value::f   ? "uintBitsToFloat(0x7f800000u)"
               : value == Value::i ? "2147483647"
                                   : "0xffffffffu";
      default:
        return value == Value::f ? "0.0" : value == Value::i ? "0" : "0u";
    }
  }
  std::string load(const std::string& offset) const {
    if (value == Value::f) return "in_ld(" + offset + ")";
    if (value == Value::i) return "in_ldi(" + offset + ")";
    return "uint(in_ldi(" + offset + "))";
  }
  std::string encode(const std::string& v) const {
    return value == Value::f ? "floatBitsToUint(" + v + ")" : "uint(" + v + ")";
  }
  std::string decode(const std::string& w) const {
    return value == Value::f   ? "uintBitsToFloat(" + w + ")"
           : value == Value::i ? "int(" + w + ")"
                               : w;
  }
  std::string store(const std::string& o, const std::string& v) const {
    if (kind == Kind::argmax || value == Value::i) return "out_sti(" + o + ", " + v + ");";
    if (value == Value::u) return "out_sti(" + o + ", int(" + v + "));";
    return "out_st(" + o + ", " + v + ");";
  }
  // Functions the kernels call: mn_comb(a, b) and, for argmax, mn_better(x, ix, b, ib).
  std::string prelude() const {
    const std::string t = type();
    std::string s =
        "bool mn_isnan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }\n";
    s += t + " mn_comb(" + t + " a, " + t + " b) { ";
    if (kind == Kind::max || kind == Kind::min) {
      const char* f = kind == Kind::max ? "max" : "min";
      const char* cmp = kind == Kind::max ? ">" : "<";
      s += value == Value::f ? std::string("return mn_isnan(a) ? a : (mn_isnan(b) ? b : (b ") +
                                   cmp + " a ? b : a)); }\n"
                             : std::string("return ") + f + "(a, b); }\n";
    } else {
      s += "return a + b; }\n";
    }
    if (kind == Kind::argmax) {
      // Index 0x7fffffff marks "no element yet". NaN beats numbers; ties go to the lower index.
      s += "bool mn_better(" + t + " x, int ix, " + t + " b, int ib) {\n";
      s += "  if (ix == 0x7fffffff) return false;\n  if (ib == 0x7fffffff) return true;\n";
      if (value == Value::f) {
        s += "  bool xn = mn_isnan(x), bn = mn_isnan(b);\n  if (xn != bn) return xn;\n";
        s += "  if (xn || x == b) return ix < ib;\n";
      } else {
        s += "  if (x == b) return ix < ib;\n";
      }
      s += "  return x > b;\n}\n";
    }
    return s;
  }
};

// Statements computing `off`, the input offset of reduced element r.
std::string reduced_offset(const Geometry& g) {
  if (g.reduced_dims.size() == 1) {
    return g.reduced_strides[0] == 1 ? "    uint off = r;\n"
                                     : "    uint off = r * " + ulit(g.reduced_strides[0]) + ";\n";
  }
  return glsl::unravel(g.reduced_dims, "r", "r") +
         "    uint off = " + offset_expr(g.reduced_strides, "r") + ";\n";
}

// The dtype of the final store: the reduction's, or its epilogue's narrowing cast's.
DType stored_dtype(const Node& n, const ReduceFusion* p) {
  return p && p->epilogue ? p->stored : n.type.dtype;
}

// The first launch: per (chunk s, output o), the reduction of elements [r0, r1). With one chunk
// it stores the final value; otherwise a partial (argmax and variance: two words) to scratch.
KernelLaunch main_launch(const LowerContext& ctx, const Reducer& red, const Geometry& g,
                         const Layout& l, double correction, const ReduceFusion* p) {
  const Node& n = ctx.node;
  const bool final = l.split == 1;
  const std::string T = red.type();
  auto epilogue = [p](const std::string& v, const std::string& o) {
    return p && p->epilogue ? "mn_reduce_epilogue(" + v + ", " + o + ")" : v;
  };
  const std::string L = std::to_string(l.lx * l.ly);
  const std::string LX = ulit(l.lx);
  const uint64_t total = l.blocks * l.split;

  std::string s = glsl::header();
  if (!p || !p->prologue) s += glsl::buffer(0, ctx.inputs[0].dtype, "in", true);
  if (final) {
    s += glsl::buffer(1, stored_dtype(n, p), "out", false);
  } else {
    s += "layout(std430, set = 0, binding = 1) buffer Buffer1 { uint part[]; };\n";
  }
  s += red.prelude();
  if (p) s += p->declarations;
  if (l.ly > 1) {
    s += "shared " + T + " s_val[" + L + "];\n";
    if (red.kind == Kind::argmax) s += "shared int s_idx[" + L + "];\n";
  }
  s += "void main() {\n";
  s += "  uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;\n";
  s += "  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (g >= " + ulit(total) + ") return;\n";  // the folded grid's tail; uniform per group
  s += "  uint blk = g % " + ulit(l.blocks) + ", s = g / " + ulit(l.blocks) + ";\n";
  s += "  uint o = blk * " + LX + " + lx;\n";
  s += "  bool live = o < " + ulit(g.outputs) + ";\n";
  s += "  uint oc = live ? o : 0u;\n";
  s += glsl::unravel(g.kept_dims, "oc", "k");
  s += "  uint base = " + offset_expr(g.kept_strides, "k") + ";\n";
  s += "  uint r0 = s * " + ulit(l.chunk) + ", r1 = min(r0 + " + ulit(l.chunk) + ", " +
       ulit(g.reduced) + ");\n";
  s += "  uint r_begin = live ? r0 + ly : r1;\n";
  const std::string loop =
      "  for (uint r = r_begin; r < r1; r += " + ulit(l.ly) + ") {\n" + reduced_offset(g);
  // The tree over the ly lanes of each output; afterwards lane 0's slot holds the result.
  auto tree = [&](const std::string& var) {
    if (l.ly == 1) return std::string();
    std::string t = "  s_val[ly * " + LX + " + lx] = " + var + ";\n";
    if (red.kind == Kind::argmax) t += "  s_idx[ly * " + LX + " + lx] = besti;\n";
    t += "  barrier();\n";
    t += "  for (uint h = " + ulit(l.ly / 2) + "; h > 0u; h >>= 1) {\n";
    t +=
        "    if (ly < h) {\n      uint a = ly * " + LX + " + lx, b = (ly + h) * " + LX + " + lx;\n";
    if (red.kind == Kind::argmax) {
      t += "      if (mn_better(s_val[b], s_idx[b], s_val[a], s_idx[a])) { s_val[a] = s_val[b]; "
           "s_idx[a] = s_idx[b]; }\n";
    } else {
      t += "      s_val[a] = mn_comb(s_val[a], s_val[b]);\n";
    }
    t += "    }\n    barrier();\n  }\n";
    t += "  " + var + " = s_val[lx];\n";
    if (red.kind == Kind::argmax) t += "  besti = s_idx[lx];\n";
    return t;
  };

  if (red.kind == Kind::argmax) {
    s += "  " + T + " best = " + red.identity() + "; int besti = 0x7fffffff;\n";
    s += loop + "    " + T + " x = " + red.load("base + off") + ";\n";
    s += "    if (mn_better(x, int(r), best, besti)) { best = x; besti = int(r); }\n  }\n";
    s += tree("best");
  } else {
    s += "  " + T + " acc = " + red.identity() + ";\n";
    s += loop + "    acc = mn_comb(acc, " + red.load("base + off") + ");\n  }\n";
    s += tree("acc");
  }
  if (red.kind == Kind::variance) {
    // Second pass over the chunk around its mean: no cancellation for large means.
    s += "  float count = float(r1 - r0);\n  float mean = acc / count;\n";
    if (l.ly > 1) s += "  barrier();\n";
    s += "  float m2 = 0.0;\n";
    s += loop + "    float d = in_ld(base + off) - mean;\n    m2 += d * d;\n  }\n";
    s += tree("m2");
  }

  // The value stored for a sum, mean, max or min (argmax and variance store their own).
  const std::string value = epilogue(
      red.kind == Kind::mean ? "acc / " + glsl::float_literal(static_cast<double>(g.reduced))
                             : std::string("acc"),
      "o");
  if (p && p->tail) {
    // Every lane of the row applies the tail to its elements (the row is o's contiguous range:
    // reduce_takes_row_tail).
    s += "  if (live) {\n    float mn_row_value = " + value + ";\n";
    s += "    for (uint r = ly; r < " + ulit(g.reduced) + "; r += " + ulit(l.ly) +
         ") mn_row_tail(o * " + ulit(g.reduced) + " + r, mn_row_value);\n  }\n";
  }
  s += "  if (ly != 0u || !live) return;\n";
  if (final) {
    switch (red.kind) {
      case Kind::argmax:
        s += "  " + red.store("o", "besti") + "\n";
        break;
      case Kind::variance:
        s += "  " +
             red.store("o", "m2 / max(count - " + glsl::float_literal(correction) + ", 0.0)") +
             "\n";
        break;
      default:
        s += "  " + red.store("o", value) + "\n";
    }
  } else {
    const std::string slot = "s * " + ulit(g.outputs) + " + o";
    switch (red.kind) {
      case Kind::argmax:
        s += "  part[2u * (" + slot + ")] = " + red.encode("best") + ";\n";
        s += "  part[2u * (" + slot + ") + 1u] = uint(besti);\n";
        break;
      case Kind::variance:
        s += "  part[2u * (" + slot + ")] = floatBitsToUint(mean);\n";
        s += "  part[2u * (" + slot + ") + 1u] = floatBitsToUint(m2);\n";
        break;
      default:
        s += "  part[" + slot + "] = " + red.encode("acc") + ";\n";
    }
  }
  s += "}\n";

  KernelLaunch k;
  k.name = std::string(n.op_name()) + (final ? "" : "_partial");
  k.glsl = std::move(s);
  k.workgroup = {l.lx, l.ly, 1};
  k.groups = glsl::linear_grid(total * l.lx * l.ly, ctx.device, l.lx * l.ly).groups;
  k.bindings = {{p && p->prologue ? p->extra.at(0) : ArgRef::input(0), false},
                {final ? ArgRef::output() : ArgRef::scratch(0), true}};
  if (p) {
    for (const ArgRef& a : p->extra) k.bindings.push_back({a, false});
    for (const ArgRef& a : p->tail_outputs) k.bindings.push_back({a, true});
  }
  return k;
}

// The second launch: one thread per output combines its `split` partials.
KernelLaunch combine_launch(const LowerContext& ctx, const Reducer& red, const Geometry& g,
                            const ReduceFusion* p, const Layout& l, double correction) {
  const Node& n = ctx.node;
  const std::string T = red.type();
  std::string decl =
      "layout(std430, set = 0, binding = 0) readonly buffer Buffer0 { uint part[]; };\n";
  decl += glsl::buffer(1, stored_dtype(n, p), "out", false);
  decl += red.prelude();
  if (p) decl += p->declarations;
  auto epilogue = [p](const std::string& v) {
    return p && p->epilogue ? "mn_reduce_epilogue(" + v + ", i)" : v;
  };
  const std::string S = ulit(l.split), O = ulit(g.outputs);
  std::string body;
  switch (red.kind) {
    case Kind::argmax:
      body += "  " + T + " best = " + red.identity() + "; int besti = 0x7fffffff;\n";
      body += "  for (uint s = 0u; s < " + S + "; ++s) {\n";
      body += "    " + T + " x = " + red.decode("part[2u * (s * " + O + " + i)]") + ";\n";
      body += "    int ix = int(part[2u * (s * " + O + " + i) + 1u]);\n";
      body += "    if (mn_better(x, ix, best, besti)) { best = x; besti = ix; }\n  }\n";
      body += "  " + red.store("i", "besti") + "\n";
      break;
    case Kind::variance: {
      // Chan et al.: M2 = sum of the chunks' M2 + n_s (mean_s - mean)^2.
      const std::string N = glsl::float_literal(static_cast<double>(g.reduced));
      const std::string C = glsl::float_literal(static_cast<double>(l.chunk));
      const std::string last =
          glsl::float_literal(static_cast<double>(g.reduced - (l.split - 1) * l.chunk));
      auto count = [&](const std::string& s) {
        return "(" + s + " + 1u == " + S + " ? " + last + " : " + C + ")";
      };
      body += "  float mean = 0.0;\n";
      body += "  for (uint s = 0u; s < " + S + "; ++s) mean += " + count("s") +
              " * uintBitsToFloat(part[2u * (s * " + O + " + i)]);\n";
      body += "  mean /= " + N + ";\n  float m2 = 0.0;\n";
      body += "  for (uint s = 0u; s < " + S + "; ++s) {\n";
      body += "    float d = uintBitsToFloat(part[2u * (s * " + O + " + i)]) - mean;\n";
      body += "    m2 += uintBitsToFloat(part[2u * (s * " + O + " + i) + 1u]) + " + count("s") +
              " * d * d;\n  }\n";
      body += "  " +
              red.store("i", "m2 / max(" + N + " - " + glsl::float_literal(correction) + ", 0.0)") +
              "\n";
      break;
    }
    default:
      body += "  " + T + " acc = " + red.identity() + ";\n";
      body += "  for (uint s = 0u; s < " + S + "; ++s) acc = mn_comb(acc, " +
              red.decode("part[s * " + O + " + i]") + ");\n";
      if (red.kind == Kind::mean) {
        body += "  " +
                red.store(
                    "i", epilogue("acc / " + glsl::float_literal(static_cast<double>(g.reduced)))) +
                "\n";
      } else {
        body += "  " + red.store("i", epilogue("acc")) + "\n";
      }
  }
  KernelLaunch k =
      glsl::elementwise_launch(std::string(n.op_name()) + "_combine", decl, body, g.outputs,
                               ctx.device, {{ArgRef::scratch(0), false}, {ArgRef::output(), true}});
  if (p) {
    for (const ArgRef& a : p->extra) k.bindings.push_back({a, false});
  }
  return k;
}

Lowering lower_reduction(const LowerContext& ctx, Kind kind, const std::vector<int64_t>& axes,
                         double correction = 0, const ReduceFusion* p = nullptr) {
  glsl::require_storage(ctx);
  const DType in = ctx.inputs[0].dtype;
  const Reducer red{kind, is_float(in) ? Value::f : in == DType::u32 ? Value::u : Value::i};
  const Geometry g = geometry(ctx.inputs[0].shape, axes);
  const Layout l = layout_for(g, ctx.device);
  Lowering low;
  low.launches.push_back(main_launch(ctx, red, g, l, correction, p));
  if (l.split > 1) {
    const uint64_t words = (kind == Kind::argmax || kind == Kind::variance) ? 2 : 1;
    low.scratch_bytes.push_back(l.split * g.outputs * words * 4);
    low.launches.push_back(combine_launch(ctx, red, g, p, l, correction));
  }
  return low;
}

std::vector<int64_t> axes_of(const LowerContext& ctx, const std::vector<int64_t>& axes) {
  return ops::normalize_axes(axes, ctx.inputs[0].rank(), ctx.node.op_name());
}

// sum_to reduces the leading extra axes and the axes the target holds as 1.
std::vector<int64_t> sum_to_axes(const Shape& in, const Shape& target) {
  std::vector<int64_t> axes;
  const size_t lead = in.size() - target.size();
  for (size_t d = 0; d < in.size(); ++d) {
    if (d < lead || (target[d - lead] == 1 && in[d] != 1)) axes.push_back(static_cast<int64_t>(d));
  }
  return axes;
}

}  // namespace

bool reduce_accepts_fusion(const Node& node, std::span<const TensorType> inputs) {
  const std::string_view op = node.op_name();
  if (op != "sum" && op != "mean" && op != "max" && op != "min" && op != "sum_to") return false;
  if (inputs.size() != 1 || inputs[0].dtype != DType::f32 || node.type.dtype != DType::f32) {
    return false;
  }
  return op != "sum_to" || !sum_to_axes(inputs[0].shape, node.type.shape).empty();
}

namespace {

// The axes a fusable reduction reduces.
std::vector<int64_t> fusable_axes(const Node& node, std::span<const TensorType> inputs) {
  if (node.op_name() == "sum_to") return sum_to_axes(inputs[0].shape, node.type.shape);
  return ops::normalize_axes(node.attrs.as<ReduceAttrs>().axes, inputs[0].rank(), node.op_name());
}

}  // namespace

bool reduce_takes_row_tail(const Node& node, std::span<const TensorType> inputs,
                           const DeviceTraits& device) {
  if (!reduce_accepts_fusion(node, inputs) || inputs[0].rank() == 0) return false;
  const Shape& in = inputs[0].shape;
  const std::vector<int64_t> axes = fusable_axes(node, inputs);
  if (axes != std::vector<int64_t>{static_cast<int64_t>(in.size()) - 1} || in.back() < 2) {
    return false;
  }
  const Geometry g = geometry(in, axes);
  return layout_for(g, device).split == 1;
}

Lowering lower_reduce_fused(const LowerContext& ctx, const ReduceFusion* p) {
  const std::string_view op = ctx.node.op_name();
  if (p && !reduce_accepts_fusion(ctx.node, ctx.inputs)) {
    throw Error("reduction fusion: '" + std::string(op) + "' over " + ctx.inputs[0].str() +
                " takes no prologue or epilogue");
  }
  if (p && p->tail && !reduce_takes_row_tail(ctx.node, ctx.inputs, ctx.device)) {
    throw Error("reduction fusion: '" + std::string(op) + "' over " + ctx.inputs[0].str() +
                " takes no row tail (only the innermost axis, each row in one workgroup)");
  }
  if (op == "sum_to") {
    return lower_reduction(ctx, Kind::sum, sum_to_axes(ctx.inputs[0].shape, ctx.node.type.shape), 0,
                           p);
  }
  const Kind kind = op == "sum"    ? Kind::sum
                    : op == "mean" ? Kind::mean
                    : op == "max"  ? Kind::max
                                   : Kind::min;
  return lower_reduction(ctx, kind, axes_of(ctx, ctx.node.attrs.as<ReduceAttrs>().axes), 0, p);
}

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
    const auto& a = ctx.node.attrs.as<VarianceAttrs>();
    return lower_reduction(ctx, Kind::variance, axes_of(ctx, a.axes),
                           static_cast<double>(a.correction));
  });
  r.add("argmax", [](const LowerContext& ctx) {
    int64_t axis = ctx.node.attrs.as<ArgmaxAttrs>().axis;
    return lower_reduction(ctx, Kind::argmax, axes_of(ctx, {axis}));
  });
  r.add("sum_to", [](const LowerContext& ctx) {
    const std::vector<int64_t> axes = sum_to_axes(ctx.inputs[0].shape, ctx.node.type.shape);
    if (axes.empty()) {
      Lowering l;
      l.alias_input0 = true;
      return l;
    }
    return lower_reduction(ctx, Kind::sum, axes);
  });
}

}  // namespace mn::codegen
