// Indexed shape ops on the GPU: take (the embedding lookup), its adjoint scatter_add, one_hot.
//
// Out-of-range indices: the CPU reference throws; a kernel records the first one in the node's
// index slot (codegen/index_check.h, the session then raises mn::IndexError) and stays inside
// its tensors: take reads zero for a bad index, one_hot writes an all-zero row, and
// scatter_add skips the update.
//
// Every tensor is viewed as [outer, n, inner] around the indexed axis, with K = the number of
// indices (updates and take's output are [outer, K, inner]).
#include <algorithm>
#include <optional>

#include "codegen/glsl.h"
#include "codegen/index_check.h"
#include "codegen/lower_shape.h"
#include "ir/ops/shape.h"

namespace mn::codegen::shape_lowering {

namespace {

using namespace ops::shape_detail;

using glsl::ulit;

// Declares `uint <name>` coordinates of element i of an [outer, middle, inner] view, skipping
// the divisions that extents of 1 make needless.
std::string coordinates(int64_t outer, int64_t middle, int64_t inner, const std::string& o,
                        const std::string& m, const std::string& j) {
  std::string s;
  std::string rest = "i";
  if (inner == 1) {
    s += "  uint " + j + " = 0u;\n";
  } else {
    s += "  uint " + j + " = i % " + ulit(inner) + ";\n";
    rest = "(i / " + ulit(inner) + ")";
  }
  if (outer == 1) {
    s += "  uint " + m + " = " + rest + ";\n  uint " + o + " = 0u;\n";
  } else {
    s += "  uint " + m + " = " + rest + " % " + ulit(middle) + ";\n";
    s += "  uint " + o + " = " + rest + " / " + ulit(middle) + ";\n";
  }
  return s;
}

struct IndexedView {
  AxisSplit x;    // x (and scatter_add's output) as [outer, n, inner]
  int64_t k = 1;  // number of indices
};

IndexedView indexed_view(const LowerContext& ctx, int64_t raw_axis) {
  const int64_t axis = axis_in(ctx.node.op_name(), ctx.inputs, raw_axis, ctx.inputs[0].rank());
  return {split_at(ctx.inputs[0].shape, static_cast<int>(axis)), ctx.inputs[1].numel()};
}

// The index check of take and scatter_add: indices (input 1) in [0, n) along the axis of x,
// worded as the reference's message.
std::optional<IndexCheck> axis_check(const LowerContext& ctx, const IndexedView& v,
                                     int64_t raw_axis) {
  if (!ctx.check_indices) return std::nullopt;
  const int64_t axis = raw_axis < 0 ? raw_axis + ctx.inputs[0].rank() : raw_axis;
  return IndexCheck{
      1, v.x.n, "index", "indices",
      " along axis " + std::to_string(axis) + " of shape " + shape_str(ctx.inputs[0].shape)};
}

Lowering lower_take(const LowerContext& ctx) {
  const int64_t axis = ctx.node.attrs.as<TakeAttrs>().axis;
  const IndexedView v = indexed_view(ctx, axis);
  const DType t = ctx.node.type.dtype;
  std::string body = coordinates(v.x.outer, v.k, v.x.inner, "o", "k", "j");
  body += "  int row = in1_ldi(k);\n";
  body += "  if (row >= 0 && row < " + std::to_string(v.x.n) + ") {\n  ";
  body +=
      copy_to_out(t, "in0", "(o * " + ulit(v.x.n) + " + uint(row)) * " + ulit(v.x.inner) + " + j");
  body += "  } else {\n  " + store_constant(t, 0.0);
  // One thread per index reports it.
  body += "    " + report_bad_index(ctx, "k", "row", "o == 0u && j == 0u") + "  }\n";
  Lowering l;
  l.launches.push_back(
      per_element(ctx, "take", {0, 1}, body, static_cast<uint64_t>(ctx.node.type.numel()), true));
  l.index_check = axis_check(ctx, v, axis);
  return l;
}

Lowering lower_one_hot(const LowerContext& ctx) {
  const int64_t depth = ctx.node.attrs.as<OneHotAttrs>().depth;
  std::string body = "  int d = int(i % " + ulit(depth) + ");\n";
  body += "  int v = in0_ldi(i / " + ulit(depth) + ");\n";
  body += "  out_st(i, v == d ? 1.0 : 0.0);\n";
  body += "  " + report_bad_index(ctx, "i / " + ulit(depth), "v",
                                  "d == 0 && (v < 0 || v >= " + std::to_string(depth) + ")");
  Lowering l;
  l.launches.push_back(
      per_element(ctx, "one_hot", {0}, body, static_cast<uint64_t>(ctx.node.type.numel()), true));
  if (ctx.check_indices) l.index_check = IndexCheck{0, depth, "index", "indices", ""};
  return l;
}

// Below this many indices the deterministic path's sequential pass is cheap; above it a device
// with float atomics adds the updates directly (in an unspecified order).
constexpr int64_t kAtomicMinIndices = 16384;
constexpr uint32_t kBuildThreads = 256;

// Groups the index positions by row, in increasing k, as offsets[n + 1] | cursor[n] | list[K]
// in one int scratch buffer: counts by integer atomics (their result is exact), an exclusive
// scan, then a pass over K in chunks of kBuildThreads where each index finds its rank among
// the equal ones of its chunk, so the list comes out in index order whatever the scheduling.
// One workgroup: the phases meet at workgroup barriers.
KernelLaunch csr_build(const LowerContext& ctx, const IndexedView& v) {
  const std::string N = ulit(v.x.n), K = ulit(v.k), L = ulit(kBuildThreads);
  std::string g = glsl::header();
  g += "layout(std430, set = 0, binding = 0) readonly buffer Buffer0 { int idx[]; };\n";
  g += "layout(std430, set = 0, binding = 1) coherent buffer Buffer1 { int s[]; };\n";
  if (ctx.check_indices) g += index_slot_glsl(2);
  g += "shared int part[" + L + "];\nshared int rows[" + L + "];\n";
  g += "const uint N = " + N + ", K = " + K + ", L = " + L + ";\n";
  g += "const uint CURSOR = N + 1u, LIST = 2u * N + 1u;\n";
  g += R"(void sync() { memoryBarrierBuffer(); barrier(); }
void main() {
  uint t = gl_LocalInvocationID.x;
  for (uint r = t; r <= N; r += L) s[r] = 0;
  for (uint r = t; r < N; r += L) s[CURSOR + r] = 0;
  sync();
  for (uint k = t; k < K; k += L) {
    int row = idx[k];
    if (row >= 0 && row < int(N)) atomicAdd(s[uint(row) + 1u], 1);
    else { MN_REPORT }
  }
  sync();
  // Scan: thread t sums a contiguous run of rows, thread 0 scans the run totals.
  const uint C = (N + L - 1u) / L;
  uint lo = min(t * C, N), hi = min(lo + C, N);
  int run = 0;
  for (uint r = lo; r < hi; ++r) run += s[r + 1u];
  part[t] = run;
  barrier();
  if (t == 0u) {
    int acc = 0;
    for (uint q = 0u; q < L; ++q) { int c = part[q]; part[q] = acc; acc += c; }
  }
  barrier();
  int acc = part[t];
  for (uint r = lo; r < hi; ++r) { acc += s[r + 1u]; s[r + 1u] = acc; }
  sync();
  for (uint c = 0u; c < K; c += L) {
    uint k = c + t;
    int row = k < K ? idx[k] : -1;
    if (row < 0 || row >= int(N)) row = -1;
    rows[t] = row;
    barrier();
    int rank = 0;
    bool last = true;
    if (row >= 0) {
      for (uint q = 0u; q < t; ++q) rank += int(rows[q] == row);
      for (uint q = t + 1u; q < L && last; ++q) last = rows[q] != row;
      s[LIST + uint(s[uint(row)] + s[CURSOR + uint(row)] + rank)] = int(k);
    }
    sync();  // every cursor read precedes this chunk's cursor updates
    if (row >= 0 && last) s[CURSOR + uint(row)] += rank + 1;
    sync();
  }
}
)";
  g.replace(g.find("MN_REPORT"), 9, report_bad_index(ctx, "k", "row"));
  KernelLaunch k{"scatter_add_group",
                 g,
                 {kBuildThreads, 1, 1},
                 {1, 1, 1},
                 {{ArgRef::input(1), false}, {ArgRef::scratch(0), true}}};
  if (ctx.check_indices) k.bindings.push_back(index_slot_binding());
  return k;
}

// out[o, r, j] = x[o, r, j] + the updates of row r's indices, summed in index order.
KernelLaunch csr_gather(const LowerContext& ctx, const IndexedView& v) {
  const DType t = ctx.node.type.dtype;
  const bool ints = !is_float(t);
  const std::string sfx = ints ? "i" : "";
  std::string decl = glsl::buffer(0, ctx.inputs[0].dtype, "x", true);
  decl += glsl::buffer(1, ctx.inputs[2].dtype, "upd", true);
  decl += "layout(std430, set = 0, binding = 2) readonly buffer Buffer2 { int s[]; };\n";
  decl += glsl::buffer(3, t, "out", false);
  std::string body = coordinates(v.x.outer, v.x.n, v.x.inner, "o", "r", "j");
  body += std::string("  ") + (ints ? "int" : "float") + " acc = x_ld" + sfx + "(i);\n";
  body += "  uint e = uint(s[r + 1u]);\n";
  body += "  for (uint p = uint(s[r]); p < e; ++p) {\n";
  body += "    uint k = uint(s[" + ulit(2 * v.x.n + 1) + " + p]);\n";
  body += "    acc += upd_ld" + sfx + "((o * " + ulit(v.k) + " + k) * " + ulit(v.x.inner) +
          " + j);\n  }\n";
  body += "  out_st" + sfx + "(i, acc);\n";
  const uint64_t n = static_cast<uint64_t>(ctx.node.type.numel());
  return glsl::elementwise_launch("scatter_add", decl, body, n, ctx.device,
                                  {{ArgRef::input(0), false},
                                   {ArgRef::input(2), false},
                                   {ArgRef::scratch(0), false},
                                   {ArgRef::output(), true}});
}

// out = x, then one thread per update adds it into its row with a float atomic.
Lowering scatter_add_atomic(const LowerContext& ctx, const IndexedView& v) {
  Lowering l;
  l.launches.push_back(per_element(ctx, "scatter_add_copy", {0},
                                   copy_to_out(DType::f32, "in0", "i"),
                                   static_cast<uint64_t>(ctx.node.type.numel())));
  std::string decl = glsl::buffer(0, DType::i32, "idx", true);
  decl += glsl::buffer(1, DType::f32, "upd", true);
  decl += "layout(std430, set = 0, binding = 2) buffer Buffer2 { float out_data[]; };\n";
  if (ctx.check_indices) decl += index_slot_glsl(3);
  std::string body = coordinates(v.x.outer, v.k, v.x.inner, "o", "k", "j");
  body += "  int row = idx_ldi(k);\n";
  body += "  if (row < 0 || row >= " + std::to_string(v.x.n) + ") {\n";
  body += "    " + report_bad_index(ctx, "k", "row", "o == 0u && j == 0u");
  body += "    return;\n  }\n";
  body += "  atomicAdd(out_data[(o * " + ulit(v.x.n) + " + uint(row)) * " + ulit(v.x.inner) +
          " + j], upd_ld(i));\n";
  const uint64_t n = static_cast<uint64_t>(ctx.inputs[2].numel());
  KernelLaunch k = glsl::elementwise_launch(
      "scatter_add_atomic", decl, body, n, ctx.device,
      {{ArgRef::input(1), false}, {ArgRef::input(2), false}, {ArgRef::output(), true}});
  if (ctx.check_indices) k.bindings.push_back(index_slot_binding());
  // Extensions must precede every declaration: right after the #version line.
  k.glsl.insert(k.glsl.find('\n') + 1, "#extension GL_EXT_shader_atomic_float : require\n");
  l.launches.push_back(std::move(k));
  return l;
}

Lowering lower_scatter_add(const LowerContext& ctx) {
  const int64_t axis = ctx.node.attrs.as<ScatterAddAttrs>().axis;
  const IndexedView v = indexed_view(ctx, axis);
  Lowering l;
  if (ctx.device.float_atomics && ctx.node.type.dtype == DType::f32 && v.k >= kAtomicMinIndices) {
    l = scatter_add_atomic(ctx, v);
  } else {
    l.scratch_bytes.push_back(static_cast<uint64_t>(2 * v.x.n + 1 + v.k) * sizeof(int32_t));
    l.launches.push_back(csr_build(ctx, v));
    l.launches.push_back(csr_gather(ctx, v));
  }
  l.index_check = axis_check(ctx, v, axis);
  return l;
}

}  // namespace

void register_shape_index_lowerings(LoweringRegistry& r) {
  r.add("take", lower_take);
  r.add("scatter_add", lower_scatter_add);
  r.add("one_hot", lower_one_hot);
}

}  // namespace mn::codegen::shape_lowering
