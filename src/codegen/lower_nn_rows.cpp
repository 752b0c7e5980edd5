#include "codegen/lower_nn_rows.h"

#include <algorithm>
#include <bit>
#include <limits>

#include <meganeura/error.h>

#include "codegen/glsl.h"

namespace mn::codegen::nn_lowering {

namespace {

using glsl::ulit;

enum class Mode { thread, group, split };

struct Plan {
  Mode mode = Mode::thread;
  uint32_t local = 64;  // lanes per row (group, split) or rows per workgroup (thread)
  uint32_t cached = 0;  // group: values per lane held in registers (0: reloaded per pass)
  uint64_t split = 1;   // split: chunks per row
  uint64_t chunk = 1;   // split: elements per chunk
};

// Lanes per workgroup that every device allows (Vulkan guarantees 128 invocations).
uint32_t most_lanes(const DeviceTraits& d) {
  return std::bit_floor(std::clamp<uint32_t>(d.max_workgroup_invocations, 32, 256));
}

Plan plan_for(const RowOp& op, const DeviceTraits& d) {
  const uint32_t most = most_lanes(d);
  Plan p;
  // Strided rows read uncoalesced when lanes split them, so they go to a thread each unless
  // there are too few rows to fill a device.
  const bool group = op.n > 16 && (op.contiguous || op.rows < 256);
  const uint64_t groups = group ? op.rows : (op.rows + 63) / 64;
  if (groups < 512 && op.n >= 16384) {
    // Aim at ~1024 workgroups (a large GPU holds several per core), each reducing at least
    // 4096 elements.
    const uint64_t s = std::min<uint64_t>((1024 + op.rows - 1) / op.rows, (op.n + 4095) / 4096);
    p.chunk = (op.n + s - 1) / s;
    p.split = (op.n + p.chunk - 1) / p.chunk;
    if (p.split > 1) {
      p.mode = Mode::split;
      p.local = most;
      return p;
    }
  }
  if (group) {
    p.mode = Mode::group;
    p.local = std::clamp<uint32_t>(std::bit_ceil(static_cast<uint32_t>((op.n + 7) / 8)), 32, most);
    const uint64_t per_lane = (op.n + p.local - 1) / p.local;
    p.cached = per_lane <= 16 ? static_cast<uint32_t>(per_lane) : 0;
  }
  return p;
}

// Sum and max over a workgroup of `lanes` threads, in a fixed order (called in uniform control
// flow). The max keeps the first operand when the second is NaN, as the reference's std::max.
std::string workgroup_functions(uint32_t lanes) {
  const std::string L = ulit(lanes);
  std::string s = "shared float mn_red[" + L + "];\n";
  for (const auto& [name, comb] :
       {std::pair{"wg_sum", "a + b"}, std::pair{"wg_max", "b > a ? b : a"}}) {
    s += std::string("float ") + name + "(float v) {\n";
    s += "  uint t = gl_LocalInvocationID.x;\n  mn_red[t] = v;\n  barrier();\n";
    s += "  for (uint h = " + ulit(lanes / 2) + "; h > 0u; h >>= 1) {\n";
    s += "    if (t < h) { float a = mn_red[t], b = mn_red[t + h]; mn_red[t] = " +
         std::string(comb) + "; }\n    barrier();\n  }\n";
    s += "  float r = mn_red[0];\n  barrier();\n  return r;\n}\n";
  }
  return s;
}

// How one thread visits its elements of row r: the lanes of a group stride through [begin,
// end), a lone thread walks it; `x` is the element's value, `j` its position in the row.
struct Walk {
  bool group = false;
  uint32_t lanes = 1;
  uint32_t cached = 0;
  std::string begin = "0u", end = "MN_N";

  // The row's elements a lane keeps, loaded at clamped positions and then selected, so that
  // its loads are issued together (a load inside a branch may wait out its latency first).
  std::string load_cache() const {
    if (cached == 0) return "";
    return "  float xv[" + ulit(cached) + "];\n  for (uint k = 0u; k < " + ulit(cached) +
           "; ++k) {\n    uint j = lane + k * " + ulit(lanes) +
           ";\n    float v = x_ld(elem(r, min(j, MN_N - 1u)));\n    xv[k] = j < MN_N ? v : 0.0;\n  "
           "}\n";
  }
  std::string each(const std::string& body) const {
    if (cached != 0) {
      return "  for (uint k = 0u; k < " + ulit(cached) + "; ++k) {\n    uint j = lane + k * " +
             ulit(lanes) + ";\n    if (j < MN_N) {\n      float x = xv[k];\n" + body +
             "    }\n  }\n";
    }
    const std::string start = group ? begin + " + lane" : begin;
    return "  for (uint j = " + start + "; j < " + end + "; j += " + ulit(group ? lanes : 1) +
           ") {\n    float x = x_ld(elem(r, j));\n" + body + "  }\n";
  }
  std::string sum(const std::string& v) const {
    return group ? "  " + v + " = wg_sum(" + v + ");\n" : "";
  }
  std::string max(const std::string& v) const {
    return group ? "  " + v + " = wg_max(" + v + ");\n" : "";
  }
};

// Statements computing the row statistics a and b over the walk's elements (`cnt` of them).
// Final: b as the epilogue takes it; partial (a chunk): softmax (max, sum of exp relative to
// it), centered (mean, sum of squared deviations), rms (0, sum of squares).
std::string statistics(const RowOp& op, const Walk& w, bool final) {
  std::string s;
  switch (op.stats) {
    case RowStats::softmax:
      s += "  float a = -mn_inf();\n" + w.each("      a = x > a ? x : a;\n") + w.max("a");
      // -inf elements add 0 even where the max is -inf too: a chunk of them then combines
      // with the other chunks; a whole row of them still gives NaN through the epilogue.
      s += "  float b = 0.0;\n" + w.each("      b += x == -mn_inf() ? 0.0 : exp(x - a);\n") +
           w.sum("b");
      return s;
    case RowStats::centered:
      s += "  float a = 0.0;\n" + w.each("      a += x;\n") + w.sum("a") + "  a /= cnt;\n";
      s +=
          "  float b = 0.0;\n" + w.each("      float d = x - a;\n      b += d * d;\n") + w.sum("b");
      break;
    case RowStats::rms:
      s += "  float a = 0.0;\n  float b = 0.0;\n" + w.each("      b += x * x;\n") + w.sum("b");
      break;
  }
  if (final) s += "  b = 1.0 / sqrt(b / cnt + " + glsl::float_literal(op.eps) + ");\n";
  return s;
}

std::string common_functions(const RowOp& op) {
  std::string s = "const uint MN_ROWS = " + ulit(op.rows) + ";\nconst uint MN_N = " + ulit(op.n) +
                  ";\nfloat mn_inf() { return uintBitsToFloat(0x7f800000u); }\n";
  s += "uint elem(uint r, uint j) { return " + op.elem + "; }\n";
  s += "uint row_of(uint e) { return " + op.row_of + "; }\n";
  s += "uint col_of(uint e) { return " + op.col_of + "; }\n";
  return s;
}

// x at binding 0, the params at 1..k, the output at k + 1; the epilogue function.
std::string io_declarations(const LowerContext& ctx, const RowOp& op) {
  std::string s = glsl::buffer(0, ctx.inputs[0].dtype, "x", true);
  for (size_t i = 0; i < op.params.size(); ++i) {
    const auto& [input, name] = op.params[i];
    s += glsl::buffer(static_cast<uint32_t>(1 + i), ctx.inputs[input].dtype, name, true);
  }
  s += glsl::buffer(static_cast<uint32_t>(1 + op.params.size()), ctx.node.type.dtype, "out", false);
  s += common_functions(op);
  s +=
      "float epilogue(float x, uint r, uint j, uint e, float a, float b) {\n" + op.epilogue + "}\n";
  return s;
}

std::vector<KernelBinding> io_bindings(const RowOp& op) {
  std::vector<KernelBinding> b{{ArgRef::input(0), false}};
  for (const auto& p : op.params) b.push_back({ArgRef::input(p.first), false});
  b.push_back({ArgRef::output(), true});
  return b;
}

const char* kGroupIndex = "gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x";

// One kernel: statistics and epilogue per row, by a thread or a workgroup.
KernelLaunch fused_kernel(const LowerContext& ctx, const RowOp& op, const Plan& p) {
  const bool group = p.mode == Mode::group;
  const Walk w{group, group ? p.local : 1, group ? p.cached : 0};
  std::string s = glsl::header() + io_declarations(ctx, op);
  if (group) {
    s += workgroup_functions(p.local);
    s += "void main() {\n  uint r = " + std::string(kGroupIndex) + ";\n";
    s += "  if (r >= MN_ROWS) return;\n  uint lane = gl_LocalInvocationID.x;\n";
  } else {
    s += glsl::gid_function();
    s += "void main() {\n  uint r = gid();\n  if (r >= MN_ROWS) return;\n  uint lane = 0u;\n";
  }
  s += "  float cnt = " + glsl::float_literal(static_cast<double>(op.n)) + ";\n";
  s += w.load_cache() + statistics(op, w, true);
  s += w.each("      uint e = elem(r, j);\n      out_st(e, epilogue(x, r, j, e, a, b));\n");
  s += "}\n";
  KernelLaunch k;
  k.name = op.name;
  k.glsl = std::move(s);
  k.workgroup = {p.local, 1, 1};
  k.groups = glsl::linear_grid(group ? op.rows * p.local : op.rows, ctx.device, p.local).groups;
  k.bindings = io_bindings(op);
  return k;
}

// Split rows: partial statistics per (row, chunk), combined per row, then the epilogue per
// element.
Lowering split_lowering(const LowerContext& ctx, const RowOp& op, const Plan& p) {
  Lowering low;
  const uint64_t parts = op.rows * p.split;
  low.scratch_bytes = {parts * 2 * sizeof(float), op.rows * 2 * sizeof(float)};

  {
    const Walk w{true, p.local, 0, "j0", "j1"};
    std::string s = glsl::header() + glsl::buffer(0, ctx.inputs[0].dtype, "x", true) +
                    glsl::buffer(1, DType::f32, "part", false) + common_functions(op) +
                    workgroup_functions(p.local);
    s += "void main() {\n  uint g = " + std::string(kGroupIndex) + ";\n";
    s += "  if (g >= " + ulit(parts) + ") return;\n";
    s += "  uint r = g / " + ulit(p.split) + ", c = g % " + ulit(p.split) + ";\n";
    s += "  uint j0 = c * " + ulit(p.chunk) + ", j1 = min(j0 + " + ulit(p.chunk) + ", MN_N);\n";
    s += "  uint lane = gl_LocalInvocationID.x;\n  float cnt = float(j1 - j0);\n";
    s += statistics(op, w, false);
    s += "  if (lane == 0u) {\n    part_st(2u * g, a);\n    part_st(2u * g + 1u, b);\n  }\n}\n";
    KernelLaunch k;
    k.name = op.name + "_partial";
    k.glsl = std::move(s);
    k.workgroup = {p.local, 1, 1};
    k.groups = glsl::linear_grid(parts * p.local, ctx.device, p.local).groups;
    k.bindings = {{ArgRef::input(0), false}, {ArgRef::scratch(0), true}};
    low.launches.push_back(std::move(k));
  }

  {
    const std::string S = ulit(p.split);
    const std::string N = glsl::float_literal(static_cast<double>(op.n));
    const std::string eps = glsl::float_literal(op.eps);
    std::string decl = glsl::buffer(0, DType::f32, "part", true) +
                       glsl::buffer(1, DType::f32, "st", false) +
                       "float mn_inf() { return uintBitsToFloat(0x7f800000u); }\n";
    std::string body = "  uint first = i * " + S + ";\n";
    auto count = [&](const std::string& c) {
      const uint64_t last = op.n - (p.split - 1) * p.chunk;
      return "(" + c + " + 1u == " + S + " ? " + glsl::float_literal(static_cast<double>(last)) +
             " : " + glsl::float_literal(static_cast<double>(p.chunk)) + ")";
    };
    switch (op.stats) {
      case RowStats::softmax:
        body += "  float a = -mn_inf();\n";
        body += "  for (uint c = 0u; c < " + S +
                "; ++c) { float m = part_ld(2u * (first + c)); a = m > a ? m : a; }\n";
        body += "  float b = 0.0;\n";
        body += "  for (uint c = 0u; c < " + S + "; ++c) {\n";
        body += "    float m = part_ld(2u * (first + c)), s = part_ld(2u * (first + c) + 1u);\n";
        body += "    b += s == 0.0 ? 0.0 : s * exp(m - a);\n  }\n";
        break;
      case RowStats::centered:
        // Chan et al.: M2 = sum of the chunks' M2 + n_c (mean_c - mean)^2.
        body += "  float a = 0.0;\n";
        body += "  for (uint c = 0u; c < " + S + "; ++c) a += " + count("c") +
                " * part_ld(2u * (first + c));\n";
        body += "  a /= " + N + ";\n  float b = 0.0;\n";
        body += "  for (uint c = 0u; c < " + S + "; ++c) {\n";
        body += "    float d = part_ld(2u * (first + c)) - a;\n";
        body += "    b += part_ld(2u * (first + c) + 1u) + " + count("c") + " * d * d;\n  }\n";
        body += "  b = 1.0 / sqrt(b / " + N + " + " + eps + ");\n";
        break;
      case RowStats::rms:
        body += "  float a = 0.0, b = 0.0;\n";
        body += "  for (uint c = 0u; c < " + S + "; ++c) b += part_ld(2u * (first + c) + 1u);\n";
        body += "  b = 1.0 / sqrt(b / " + N + " + " + eps + ");\n";
        break;
    }
    body += "  st_st(2u * i, a);\n  st_st(2u * i + 1u, b);\n";
    KernelLaunch k =
        glsl::elementwise_launch(op.name + "_combine", decl, body, op.rows, ctx.device,
                                 {{ArgRef::scratch(0), false}, {ArgRef::scratch(1), true}}, 64);
    low.launches.push_back(std::move(k));
  }

  {
    const uint64_t total = op.rows * op.n;
    const std::string decl =
        io_declarations(ctx, op) +
        glsl::buffer(static_cast<uint32_t>(2 + op.params.size()), DType::f32, "st", true);
    const std::string body =
        "  uint r = row_of(i), j = col_of(i);\n"
        "  out_st(i, epilogue(x_ld(i), r, j, i, st_ld(2u * r), st_ld(2u * r + 1u)));\n";
    KernelLaunch k = glsl::elementwise_launch(op.name + "_apply", decl, body, total, ctx.device,
                                              io_bindings(op));
    k.bindings.push_back({ArgRef::scratch(1), false});
    low.launches.push_back(std::move(k));
  }
  return low;
}

}  // namespace

Lowering lower_rows(const LowerContext& ctx, const RowOp& op) {
  glsl::require_storage(ctx);
  // Offsets are 32-bit in the kernels.
  if (op.rows * op.n > std::numeric_limits<uint32_t>::max()) {
    throw Error(op.name + ": " + std::to_string(op.rows * op.n) +
                " elements exceed the GPU kernels' 32-bit indexing");
  }
  const Plan p = plan_for(op, ctx.device);
  if (p.mode == Mode::split) return split_lowering(ctx, op, p);
  Lowering low;
  low.launches.push_back(fused_kernel(ctx, op, p));
  return low;
}

}  // namespace mn::codegen::nn_lowering
