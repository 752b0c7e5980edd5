// Matrix-vector products (M = 1 or N = 1): a decoding step's every linear layer, so their
// cost is mostly latency, the weight read once per token.
//
// Matrix contiguous along K (a linear layer's [out, in] weight): one subgroup per output,
// its lanes striding K with all their loads in flight at once (up to 16 a lane; longer rows
// eight at a time), added by subgroupAdd; a workgroup
// takes as many outputs as it has subgroups. Without subgroup arithmetic, or with a long K over
// few outputs, and for matrices contiguous along the outputs: a reduction over K in shared
// memory, lanes split K when the matrix is contiguous along K, and threads take neighbouring
// outputs when it is contiguous along them; a long K over a small grid splits into chunks
// whose partial sums a second launch adds.
#include <algorithm>
#include <bit>
#include <optional>

#include "codegen/glsl.h"
#include "codegen/lower_attention.h"
#include "codegen/lower_matmul.h"
#include "codegen/matmul_epilogue.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

// Where the matrix of a GEMV lies: p runs over its non-K axis.
struct GemvLayout {
  bool left = false;  // x·B: the matrix is B and p runs over N
  int64_t p_count = 0;
  int64_t sp = 0, sk = 0;  // strides of the matrix along p and along k
};

GemvLayout gemv_layout(const MatmulGeometry& g) {
  GemvLayout l;
  l.left = g.m == 1;
  l.p_count = l.left ? g.n : g.m;
  if (l.left) {
    l.sp = g.tb ? g.k : 1;
    l.sk = g.tb ? 1 : g.n;
  } else {
    l.sp = g.ta ? 1 : g.k;
    l.sk = g.ta ? g.m : 1;
  }
  return l;
}

std::string epilogue_store(const GemvLayout& l) {
  return "C_st(bz * " + ulit(l.p_count) + " + p, mm_epilogue(acc, bz, " +
         (l.left ? "0u, p" : "p, 0u") + "))";
}

void bind_epilogue(KernelLaunch& k, const MatmulEpilogue* e) {
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  if (e) {
    for (const ArgRef& a : e->extra) k.bindings.push_back({a, false});
  }
}

// ---- a chained product (GemvExtras::chain) ----

// Its bindings from `binding` on (D, the residual, y, the partials, the counter) and the
// workgroup's outputs of h in shared memory.
std::string chain_declarations(const GemvExtras::Chain& c, uint32_t binding, int64_t rows) {
  std::string s = glsl::buffer(binding, c.matrix_dtype, "D", true) +
                  glsl::quad_view(binding, c.matrix_dtype, "D");
  if (c.residual_input >= 0) s += glsl::buffer(++binding, DType::f32, "R", true);
  s += glsl::buffer(++binding, c.out_dtype, "Y", false);
  // Coherent: the last workgroup reads the partials the others stored.
  s += "layout(std430, set = 0, binding = " + std::to_string(++binding) +
       ") coherent buffer ChainPartials { float part[]; };\n";
  s += "layout(std430, set = 0, binding = " + std::to_string(++binding) +
       ") buffer ChainCounter { uint done[]; };\n";
  return s + "shared float h_sh[" + ulit(rows) + "];\nshared bool last_sh;\n";
}

// Quads of D's columns [c0, c0 + rows) a lane holds: rows of y lid, lid + threads, ...
int64_t chain_rows_per_lane(const GemvExtras::Chain& c, uint32_t threads) {
  return (c.outs + threads - 1) / threads;
}

// The opening of main() with a chain: workgroups past the grid leave, and the workgroup's
// columns of D are loaded at once, before anything else waits (clamped to D; what lies past
// its extents is selected away by chain_finish).
std::string chain_loads(const GemvExtras::Chain& c, int64_t p, uint32_t threads, int64_t rows,
                        int64_t groups) {
  const int64_t per_lane = chain_rows_per_lane(c, threads), quads = rows / 4;
  std::string s = "  if (group >= " + ulit(groups) + ") return;\n";
  s += "  uint lid = gl_LocalInvocationIndex, c0 = group * " + ulit(rows) + ";\n";
  s += "  vec4 dq[" + ulit(per_lane * quads) + "];\n";
  for (int64_t t = 0; t < per_lane; ++t) {
    s += "  {\n    uint y = min(lid + " + ulit(t * threads) + ", " + ulit(c.outs - 1) + ");\n";
    for (int64_t q = 0; q < quads; ++q) {
      s += "    dq[" + ulit(t * quads + q) + "] = D4_ld(y * " + ulit(p / 4) + " + min(c0 / 4u + " +
           ulit(q) + ", " + ulit(p / 4 - 1) + "));\n";
    }
    s += "  }\n";
  }
  return s;
}

// After every output of h: each lane's rows of y over the workgroup's columns into its partial;
// the last workgroup adds the partials in workgroup order (16 loads in flight a lane), then the
// residual, stores y and sets the counter back to zero.
std::string chain_finish(const GemvExtras::Chain& c, int64_t p, uint32_t threads, int64_t rows,
                         int64_t groups) {
  const int64_t per_lane = chain_rows_per_lane(c, threads), quads = rows / 4;
  const std::string OUTS = ulit(c.outs);
  std::string s = "  barrier();\n";
  for (int64_t t = 0; t < per_lane; ++t) {
    s += "  {\n    uint y = lid + " + ulit(t * threads) + ";\n    float v = 0.0;\n";
    for (int64_t q = 0; q < quads; ++q) {
      const std::string at = ulit(4 * q);
      s += "    v += c0 + " + at + " < " + ulit(p) + " ? dot(dq[" + ulit(t * quads + q) +
           "], vec4(h_sh[" + at + "], h_sh[" + ulit(4 * q + 1) + "], h_sh[" + ulit(4 * q + 2) +
           "], h_sh[" + ulit(4 * q + 3) + "])) : 0.0;\n";
    }
    s += "    if (y < " + OUTS + ") part[group * " + OUTS + " + y] = v;\n  }\n";
  }
  s += "  memoryBarrierBuffer();\n  barrier();\n";
  s += "  if (lid == 0u) last_sh = atomicAdd(done[0], 1u) == " + ulit(groups - 1) + ";\n";
  s += "  barrier();\n  if (!last_sh) return;\n  memoryBarrierBuffer();\n";
  s += "  for (uint y = lid; y < " + OUTS + "; y += " + ulit(threads) + ") {\n";
  s += "    float sum = 0.0;\n";
  for (int64_t w0 = 0; w0 < groups; w0 += 16) {
    const int64_t n = std::min<int64_t>(16, groups - w0);
    s += "    {\n      float v[" + ulit(n) + "];\n";
    for (int64_t j = 0; j < n; ++j) {
      s += "      v[" + ulit(j) + "] = part[" + ulit((w0 + j) * c.outs) + " + y];\n";
    }
    s += "      for (uint j = 0u; j < " + ulit(n) + "; ++j) sum += v[j];\n    }\n";
  }
  s += std::string("    Y_st(y, sum") + (c.residual_input >= 0 ? " + R_ld(y)" : "") + ");\n  }\n";
  return s + "  if (lid == 0u) done[0] = 0u;\n";
}

// ---- the vector combined from an attention's partials (GemvExtras::combine) ----

// GLSL: x_sh, the vector of K elements, and combine_vector(), which every invocation of the
// workgroup calls once: each computes its elements from their head's ranges, then a barrier.
// The first eight ranges' maxima, sums and values and the count of ranges holding keys (after
// the partials, PartialsLayout) are loaded at once: one memory latency for a decoding step's
// short cache, the first ranges combined whatever the count (past it they are empty, weight 0;
// masking them by the count measured 10 % slower on an H100, its load awaited first). Ranges
// past the first eight, up to the count (a long cache), follow eight at a time, merged into the
// running maximum. A head whose ranges hold no key gives zeros, as the attention's own combine
// does.
std::string combine_declarations(const GemvExtras::Combine& c, int64_t k, uint32_t threads) {
  const std::string K = ulit(k), P = ulit(2 + c.dv), SPLITS = ulit(c.splits);
  const int64_t per_lane = (k + threads - 1) / threads, first = std::min<int64_t>(8, c.splits);
  const std::string F = ulit(first), PF = ulit(per_lane * first);
  // Where the counts start: after every head's ranges.
  const attention_lowering::PartialsLayout layout{static_cast<uint64_t>(k / c.dv),
                                                  static_cast<uint64_t>(c.splits),
                                                  static_cast<uint64_t>(c.dv)};
  const std::string COUNTS = ulit(layout.counts_offset());
  std::string s = "shared float x_sh[" + K + "];\n";
  s += "float combine_inf() { return uintBitsToFloat(0x7f800000u); }\n";
  // Range p's weight against the maximum mx: 0 for a range without keys.
  s += "float combine_weight(float m, float mx) { return m == -combine_inf() ? 0.0 : exp(m - mx); "
       "}\n";
  s += "void combine_vector() {\n  uint t = gl_LocalInvocationIndex;\n";
  s += "  float pm[" + PF + "], pl[" + PF + "], pv[" + PF + "];\n";
  s += "  uint busy[" + ulit(per_lane) + "], base[" + ulit(per_lane) + "];\n";
  s += "  for (uint u = 0u; u < " + ulit(per_lane) + "; ++u) {\n";
  // Clamped: a lane past K loads the last element's and stores nothing.
  s += "    uint x = min(t + u * " + ulit(threads) + ", " + ulit(k - 1) + ");\n";
  s += "    uint h = x / " + ulit(c.dv) + ";\n";
  s += "    base[u] = h * " + SPLITS + " * " + P + " + 2u + x % " + ulit(c.dv) + ";\n";
  s += "    busy[u] = min(uint(A_ld(" + COUNTS + " + h)), " + SPLITS + ");\n";
  s += "    for (uint p = 0u; p < " + F + "; ++p) {\n";
  s += "      uint at = h * " + SPLITS + " * " + P + " + p * " + P + ";\n";
  s += "      pm[u * " + F + " + p] = A_ld(at);\n";
  s += "      pl[u * " + F + " + p] = A_ld(at + 1u);\n";
  s += "      pv[u * " + F + " + p] = A_ld(base[u] + p * " + P + ");\n";
  s += "    }\n  }\n";
  s += "  for (uint u = 0u; u < " + ulit(per_lane) + "; ++u) {\n";
  // The first ranges unmasked (a range past the count is an empty one, weight 0): nothing of
  // them waits for the count, whose use a compiler could otherwise move their loads behind.
  s += "    uint n = busy[u];\n    float mx = -combine_inf();\n";
  s += "    for (uint p = 0u; p < " + F + "; ++p) mx = max(mx, pm[u * " + F + " + p]);\n";
  s += "    float lsum = 0.0, o = 0.0;\n";
  s += "    for (uint p = 0u; p < " + F + "; ++p) {\n";
  s += "      float w = combine_weight(pm[u * " + F + " + p], mx);\n";
  s += "      lsum += w * pl[u * " + F + " + p];\n";
  s += "      o += w == 0.0 ? 0.0 : w * pv[u * " + F + " + p];\n    }\n";
  if (c.splits > first) {
    const std::string LAST = ulit(c.splits - 1);
    s += "    uint head = min(t + u * " + ulit(threads) + ", " + ulit(k - 1) + ") / " + ulit(c.dv) +
         ";\n";
    s += "    for (uint p0 = " + F + "; p0 < n; p0 += 8u) {\n";
    s += "      float qm[8], ql[8], qv[8];\n";
    s += "      for (uint y = 0u; y < 8u; ++y) {\n";
    s += "        uint p = min(p0 + y, " + LAST + "), at = head * " + SPLITS + " * " + P +
         " + p * " + P + ";\n";
    s += "        qm[y] = A_ld(at);\n        ql[y] = A_ld(at + 1u);\n";
    s += "        qv[y] = A_ld(base[u] + p * " + P + ");\n      }\n";
    s += "      float nm = mx;\n";
    s += "      for (uint y = 0u; y < 8u; ++y) {\n        if (p0 + y < n) nm = max(nm, qm[y]);\n   "
         "   }\n";
    s += "      float a = combine_weight(mx, nm);\n      lsum *= a;\n      o *= a;\n      mx = "
         "nm;\n";
    s += "      for (uint y = 0u; y < 8u; ++y) {\n";
    s += "        float w = p0 + y < n ? combine_weight(qm[y], mx) : 0.0;\n";
    s += "        lsum += w * ql[y];\n        o += w == 0.0 ? 0.0 : w * qv[y];\n      }\n    }\n";
  }
  s += "    uint x = t + u * " + ulit(threads) + ";\n";
  s += "    if (x < " + K + ") x_sh[x] = lsum == 0.0 ? 0.0 : o / lsum;\n  }\n";
  return s + "  barrier();\n}\n";
}

// The subgroup kernel's buffers, in binding order: A, B, C, the epilogue's, then the extras'
// (gamma, the sibling matrix, each stacked product's matrix and output, the chain's), their
// quad views, the combine's vector and the epilogue function.
std::string gemv_declarations(const LowerContext& ctx, const MatmulGeometry& g,
                              const MatmulEpilogue* e, const GemvExtras* x, uint32_t threads,
                              int64_t rows) {
  const bool gamma = x && x->norm && x->gamma_input >= 0, sibling = x && x->sibling_input >= 0;
  const std::vector<GemvExtras::Stacked> stacked =
      x ? x->stacked : std::vector<GemvExtras::Stacked>{};
  std::string s =
      glsl::header({"GL_KHR_shader_subgroup_basic", "GL_KHR_shader_subgroup_arithmetic"});
  s += glsl::buffer(0, ctx.inputs[0].dtype, "A", true) +
       glsl::buffer(1, ctx.inputs[1].dtype, "B", true) +
       glsl::buffer(2, ctx.node.type.dtype, "C", false);
  if (e) s += e->declarations;
  const uint32_t binding = 3 + static_cast<uint32_t>(e ? e->extra.size() : 0);
  const uint32_t gamma_binding = binding, sibling_binding = binding + (gamma ? 1 : 0);
  // Stacked product j: its matrix "M<j>" and its output "C<j>", after gamma.
  const uint32_t stacked_binding = binding + (gamma ? 1 : 0) + (sibling ? 1 : 0);
  if (gamma) s += glsl::buffer(gamma_binding, x->gamma_dtype, "G", true);
  if (sibling) {
    s += glsl::buffer(sibling_binding, x->sibling_dtype, "S", true);
    s += "float mm_sibling;\n";
  }
  for (size_t j = 0; j < stacked.size(); ++j) {
    const auto at = stacked_binding + 2 * static_cast<uint32_t>(j);
    s += glsl::buffer(at, stacked[j].matrix_dtype, "M" + std::to_string(j), true);
    s += glsl::buffer(at + 1, stacked[j].out_dtype, "C" + std::to_string(j), false);
  }
  if (g.k % 4 == 0) {
    s +=
        glsl::quad_view(0, ctx.inputs[0].dtype, "A") + glsl::quad_view(1, ctx.inputs[1].dtype, "B");
    if (gamma) s += glsl::quad_view(gamma_binding, x->gamma_dtype, "G");
    if (sibling) s += glsl::quad_view(sibling_binding, x->sibling_dtype, "S");
    for (size_t j = 0; j < stacked.size(); ++j) {
      s += glsl::quad_view(stacked_binding + 2 * static_cast<uint32_t>(j), stacked[j].matrix_dtype,
                           "M" + std::to_string(j));
    }
  }
  const uint32_t chain_binding = stacked_binding + 2 * static_cast<uint32_t>(stacked.size());
  if (x && x->chain) s += chain_declarations(*x->chain, chain_binding, rows);
  if (x && x->combine) s += combine_declarations(*x->combine, g.k, threads);
  return s + epilogue_function(e);
}

// The subgroup kernel's bindings, in gemv_declarations' order.
void bind_gemv(KernelLaunch& k, const MatmulEpilogue* e, const GemvExtras* x) {
  bind_epilogue(k, e);
  if (!x) return;
  if (x->norm && x->gamma_input >= 0) k.bindings.push_back({ArgRef::input(x->gamma_input), false});
  if (x->sibling_input >= 0) k.bindings.push_back({ArgRef::input(x->sibling_input), false});
  for (size_t j = 0; j < x->stacked.size(); ++j) {
    k.bindings.push_back({ArgRef::input(x->stacked[j].matrix_input), false});
    k.bindings.push_back({ArgRef::output(static_cast<int>(j + 1)), true});
  }
  if (const std::optional<GemvExtras::Chain>& c = x->chain) {
    k.bindings.push_back({ArgRef::input(c->matrix_input), false});
    if (c->residual_input >= 0) k.bindings.push_back({ArgRef::input(c->residual_input), false});
    k.bindings.push_back({ArgRef::output(1), true});
    k.bindings.push_back({ArgRef::scratch(0), true});
    k.bindings.push_back({ArgRef::counters(0), true});
  }
}

// One subgroup per output. The subgroup size is read at run time (a device may run compute
// shaders at another width than it reports), so any width is correct; the reported one sizes
// the workgroup. With K a multiple of 4, lanes read four elements at a time. The K loop keeps
// up to 16 loads in flight per lane (rows longer than that: eight at a time, then the rest
// at once); under a norm it also sums the vector's squares, which every subgroup
// reads whole anyway, so the norm costs no pass and no barrier of its own.
Lowering gemv_subgroups(const LowerContext& ctx, const MatmulGeometry& g, const GemvLayout& l,
                        int64_t batch, const MatmulEpilogue* e, const GemvExtras* x) {
  const std::optional<GemvExtras::Chain> chain = x ? x->chain : std::nullopt;
  const uint32_t threads =
      chain ? gemv_chain_threads(ctx.device, l.p_count, chain->outs)
            : std::min<uint32_t>(256, std::bit_floor(ctx.device.max_workgroup_invocations));
  if (chain && (threads == 0 || batch != 1 || !l.left || (x && !x->stacked.empty()))) {
    throw Error("matmul: this GEMV cannot chain a second product");
  }
  const std::optional<GemvExtras::Combine> combine = x ? x->combine : std::nullopt;
  if (combine &&
      (batch != 1 || !l.left || x->norm || chain || combine->dv <= 0 || g.k % combine->dv != 0)) {
    throw Error("matmul: this GEMV cannot combine an attention's partials into its vector");
  }
  const uint32_t width = std::clamp<uint32_t>(ctx.device.subgroup_size, 1, threads);
  const int64_t rows = threads / width;  // outputs per workgroup
  const int64_t outputs = l.p_count * batch;
  const bool quads = g.k % 4 == 0;
  const std::string vec_name = l.left ? "A" : "B", mat_name = l.left ? "B" : "A";

  const bool norm = x && x->norm, gamma = norm && x->gamma_input >= 0;
  const bool sibling = x && x->sibling_input >= 0;
  const std::vector<GemvExtras::Stacked> stacked =
      x ? x->stacked : std::vector<GemvExtras::Stacked>{};
  if (!stacked.empty() && (e || sibling || batch != 1 || !l.left)) {
    throw Error("matmul: stacked GEMV products take no epilogue, sibling or batch");
  }
  std::string s = gemv_declarations(ctx, g, e, x, threads, rows);

  // Loads of element (or quad) `i` of the vector, gamma and the matrices; `dot` combines two.
  const std::string T = quads ? "vec4" : "float", q = quads ? "4" : "";
  const int64_t count = quads ? g.k / 4 : g.k;  // loads along K
  const std::string vbase = l.left ? "abase" : "bbase", mbase = l.left ? "bbase" : "abase";
  const std::string unit = quads ? " / 4u" : "";
  auto load = [&](const std::string& name, const std::string& base, const std::string& i) {
    if (combine && name == vec_name) {  // the combined vector, in shared memory (batch 1)
      return quads ? "vec4(x_sh[4u * " + i + "], x_sh[4u * " + i + " + 1u], x_sh[4u * " + i +
                         " + 2u], x_sh[4u * " + i + " + 3u])"
                   : "x_sh[" + i + "]";
    }
    return name + q + "_ld(" + (base.empty() ? i : base + unit + " + " + i) + ")";
  };
  auto dot = [&](const std::string& a, const std::string& b) {
    return quads ? "dot(" + a + ", " + b + ")" : a + " * " + b;
  };
  // The matrix is contiguous along K here: row p starts at p·K.
  const std::string row = "p * " + ulit(count) + " + ";
  // One step at i; `valid` (when given) masks a step past K, which loads at the last element
  // instead and adds exactly nothing (a select of the products, whatever the loads hold): every
  // tail step's loads are then issued with the others, where a load inside a branch would wait
  // out its latency before the next one.
  // `held`: the matrix's value at this step, loaded earlier (combine_preload); empty: load it.
  auto step = [&](const std::string& matrix, int u, const std::string& i,
                  const std::string& valid = "", const std::string& held = "") {
    const std::string U = std::to_string(u);
    auto add = [&](const std::string& to, const std::string& term) {
      return " " + to + " += " + (valid.empty() ? term : valid + " ? " + term + " : 0.0") + ";";
    };
    std::string t = "      { " + T + " v = " + load(vec_name, vbase, i) +
                    ", w = " + (held.empty() ? load(matrix, mbase, row + i) : held) + ";";
    if (sibling) t += " " + T + " sv = " + load("S", mbase, row + i) + ";";
    if (norm) t += add("ss" + U, dot("v", "v"));
    if (gamma) t += " v *= " + load("G", "", i) + ";";
    t += add("a" + U, dot("v", "w"));
    if (sibling) t += add("b" + U, dot("v", "sv"));
    return t + " }\n";
  };
  // One output p of `matrix`: the dot product over K, then `store` (statements using acc).
  const std::string N = ulit(count);
  const std::string last = ulit(std::max<int64_t>(count - 1, 0));
  // Loads of a row of at most 16 a lane (at the reported width), all in flight at once.
  const bool whole_rows = count <= 16 * static_cast<int64_t>(width);
  const int64_t row_loads = (count + width - 1) / width;
  // With the vector combined from partials (combine_vector, a barrier), the matrix's loads of
  // the subgroup's first row are issued before it, in flight beside the partials' loads.
  const bool preload = combine && whole_rows;
  // `preloaded`: the row's first loads are in wpre[] (preload).
  auto product = [&](const std::string& matrix, const std::string& store, bool preloaded = false) {
    std::string t = "    float a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;\n";
    if (norm) t += "    float ss0 = 0.0, ss1 = 0.0, ss2 = 0.0, ss3 = 0.0;\n";
    if (sibling) t += "    float b0 = 0.0, b1 = 0.0, b2 = 0.0, b3 = 0.0;\n";
    auto masked = [&](int u, const std::string& at) {
      return step(matrix, u % 4, "min(" + at + ", " + last + ")", at + " < " + N,
                  preloaded ? "wpre[" + std::to_string(u) + "]" : "");
    };
    t += "    uint i = lane;\n";
    if (whole_rows) {
      // All of the row's loads in flight at once, then whatever a narrower subgroup than
      // reported leaves.
      for (int64_t u = 0; u < row_loads; ++u) {
        t += masked(static_cast<int>(u), "(i + " + ulit(u) + " * S)");
      }
      t += "    for (i += " + ulit(row_loads) + " * S; i < " + N + "; i += S)\n" +
           step(matrix, 0, "i");
    } else {
      // Eight loads in flight per lane, and the rest (fewer than eight per lane) all at once.
      t += "    for (; i + 7u * S < " + N + "; i += 8u * S) {\n";
      for (int u = 0; u < 8; ++u) t += step(matrix, u % 4, "(i + " + ulit(u) + " * S)");
      t += "    }\n";
      for (int u = 0; u < 7; ++u) t += masked(u, "(i + " + ulit(u) + " * S)");
    }
    std::string scale;
    if (norm) {
      t += "    float rstd = inversesqrt(subgroupAdd((ss0 + ss1) + (ss2 + ss3)) / " +
           glsl::float_literal(static_cast<double>(g.k)) + " + " + glsl::float_literal(x->eps) +
           ");\n";
      scale = " * rstd";
    }
    t += "    float acc = subgroupAdd((a0 + a1) + (a2 + a3))" + scale + ";\n";
    if (sibling) t += "    mm_sibling = subgroupAdd((b0 + b1) + (b2 + b3))" + scale + ";\n";
    return t + "    if (subgroupElect()) " + store + ";\n";
  };

  int64_t total = outputs;
  for (const GemvExtras::Stacked& st : stacked) total += st.rows;
  const int64_t groups_all = (total + rows - 1) / rows;
  s += "void main() {\n";
  s += "  uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  uint S = gl_SubgroupSize, lane = gl_SubgroupInvocationID;\n";
  if (chain) s += chain_loads(*chain, l.p_count, threads, rows, groups_all);
  if (preload) {
    // The subgroup's first row (batch 1: its output p), clamped into the matrix: a subgroup
    // past the outputs leaves the loop without using them.
    s += "  " + T + " wpre[" + ulit(row_loads) + "];\n  {\n";
    s += "    uint p = min(group * " + ulit(rows) + " + gl_SubgroupID, " + ulit(outputs - 1) +
         "), i = lane;\n";
    for (int64_t u = 0; u < row_loads; ++u) {
      s += "    wpre[" + ulit(u) +
           "] = " + load(mat_name, "", row + "min(i + " + ulit(u) + " * S, " + last + ")") + ";\n";
    }
    s += "  }\n";
  }
  if (combine) s += "  combine_vector();\n";
  s += "  for (uint r = gl_SubgroupID; r < " + ulit(rows) + "; r += gl_NumSubgroups) {\n";
  s += "    uint o = group * " + ulit(rows) + " + r;\n";
  // Uniform in the subgroup; a chain's missing outputs of h multiply nothing.
  s += chain ? "    if (o >= " + ulit(total) + ") {\n      if (subgroupElect()) h_sh[r] = 0.0;\n" +
                   "      continue;\n    }\n"
             : "    if (o >= " + ulit(total) + ") break;\n";
  // The stacked products' outputs follow the product's (batch 1): each subgroup takes one row
  // of one matrix, uniformly.
  int64_t first = outputs;
  for (size_t j = 0; j < stacked.size(); ++j) {
    const std::string J = std::to_string(j);
    s += "    if (o >= " + ulit(first) + " && o < " + ulit(first + stacked[j].rows) + ") {\n";
    s += "      uint bz = 0u, p = o - " + ulit(first) + ";\n" + batch_bases(g);
    s += product("M" + J, "C" + J + "_st(p, acc)") + "      continue;\n    }\n";
    first += stacked[j].rows;
  }
  s += "    uint bz = o / " + ulit(l.p_count) + ", p = o % " + ulit(l.p_count) + ";\n";
  s += batch_bases(g);
  // A chain keeps h's element for its product (shared memory) as well as storing it.
  const std::string store = chain ? "{ float hv = mm_epilogue(acc, bz, 0u, p); C_st(bz * " +
                                        ulit(l.p_count) + " + p, hv); h_sh[r] = hv; }"
                                  : epilogue_store(l);
  if (preload) {
    s += "    if (r == gl_SubgroupID) {\n" + product(mat_name, store, true) + "    } else {\n" +
         product(mat_name, store) + "    }\n";
  } else {
    s += product(mat_name, store);
  }
  s += "  }\n";
  if (chain) s += chain_finish(*chain, l.p_count, threads, rows, groups_all);
  s += "}\n";

  KernelLaunch k;
  k.name =
      std::string("matmul_gemv") + (norm ? "+prologue[rms_norm]" : "") +
      (combine ? "+prologue[attention_combine]" : "") + (sibling ? "+sibling" : "") +
      (stacked.empty() ? "" : "+stacked[" + std::to_string(stacked.size()) + "]") +
      (chain ? std::string("+then[matmul") + (chain->residual_input >= 0 ? ",add]" : "]") : "");
  k.glsl = std::move(s);
  k.workgroup = {threads, 1, 1};
  k.groups =
      glsl::linear_grid(static_cast<uint64_t>(groups_all) * threads, ctx.device, threads).groups;
  bind_gemv(k, e, x);
  Lowering out;
  out.launches.push_back(std::move(k));
  if (chain) {
    out.scratch_bytes.push_back(static_cast<uint64_t>(groups_all * chain->outs) * sizeof(float));
    out.counter_bytes.push_back(sizeof(uint32_t));
  }
  return out;
}

// The reduction over K in shared memory. The vector is contiguous along K whatever its flags
// (its other extent is 1). When the grid is small and K long, K splits into chunks whose partial
// sums a second launch adds up.
Lowering gemv_shared_memory(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                           const MatmulEpilogue* e) {
  const bool left = g.m == 1;  // x·B: the matrix is B and p runs over N
  const int64_t p_count = left ? g.n : g.m;
  // Strides of the matrix along p and along k.
  int64_t sp = 0, sk = 0;
  if (left) {
    sp = g.tb ? g.k : 1;
    sk = g.tb ? 1 : g.n;
  } else {
    sp = g.ta ? 1 : g.k;
    sk = g.ta ? g.m : 1;
  }
  const bool k_contiguous = sk == 1 && g.k > 1;
  const uint32_t threads =
      std::min<uint32_t>(256, std::bit_floor(ctx.device.max_workgroup_invocations));
  uint32_t lx = 0, ly = 0;
  if (k_contiguous) {  // lanes along K, as rows of a reduction
    ly = std::min<uint32_t>(threads,
                            std::max<uint32_t>(32, std::bit_ceil(static_cast<uint64_t>(g.k))));
    lx = threads / ly;
  } else if (g.k <= 16 || (p_count * batch >= 8192 && g.k <= 256)) {
    lx = threads / 2;  // one thread per output, neighbours reading neighbouring addresses
    ly = 1;
  } else {
    lx = std::min<uint32_t>(32, std::bit_ceil(static_cast<uint64_t>(p_count)));
    ly = std::min<uint32_t>(threads / lx, std::bit_ceil(static_cast<uint64_t>(g.k)));
  }
  const int64_t blocks = (p_count + lx - 1) / lx;
  const int64_t outputs = p_count * batch;
  // Split K when there are too few groups to keep a large device's memory busy: ~2048
  // groups, each lane still summing >= 16 products, and at most 256 partials for the second
  // launch's one thread per output to add.
  const int64_t per_lane = (g.k + ly - 1) / ly;
  int64_t split = 1, chunk = g.k;
  if (blocks * batch < 1024 && per_lane >= 64) {
    split = std::min<int64_t>({(2048 + blocks * batch - 1) / (blocks * batch), per_lane / 16, 256});
    chunk = (g.k + split - 1) / split;
    split = (g.k + chunk - 1) / chunk;
  }
  const int64_t total = blocks * batch * split;
  const std::string LX = ulit(lx), L = std::to_string(lx * ly);

  std::string s = glsl::header() + glsl::buffer(0, ctx.inputs[0].dtype, "A", true) +
                  glsl::buffer(1, ctx.inputs[1].dtype, "B", true);
  s += split == 1 ? glsl::buffer(2, ctx.node.type.dtype, "C", false)
                  : "layout(std430, set = 0, binding = 2) buffer Buffer2 { float part[]; };\n";
  if (split == 1 && e) s += e->declarations;
  if (split == 1) s += epilogue_function(e);
  if (ly > 1) s += "shared float s_acc[" + L + "];\n";
  s += "void main() {\n";
  s += "  uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;\n";
  s += "  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (g >= " + ulit(total) + ") return;\n";  // uniform per group
  s += "  uint s = g / " + ulit(blocks * batch) + ", gb = g % " + ulit(blocks * batch) + ";\n";
  s +=
      "  uint bz = gb / " + ulit(blocks) + ", p = (gb % " + ulit(blocks) + ") * " + LX + " + lx;\n";
  s += batch_bases(g);
  s += "  bool live = p < " + ulit(p_count) + ";\n";
  s += "  uint k1 = min((s + 1u) * " + ulit(chunk) + ", " + ulit(g.k) + ");\n";
  const std::string vec = left ? "A_ld(abase + k)" : "B_ld(bbase + k)";
  const std::string mat = left ? "B_ld(bbase + p * " + ulit(sp) + " + k * " + ulit(sk) + ")"
                               : "A_ld(abase + p * " + ulit(sp) + " + k * " + ulit(sk) + ")";
  s += "  float acc = 0.0;\n";
  s += "  if (live) for (uint k = s * " + ulit(chunk) + " + ly; k < k1; k += " + ulit(ly) +
       ") acc += " + vec + " * " + mat + ";\n";
  if (ly > 1) {
    s += "  s_acc[ly * " + LX + " + lx] = acc;\n  barrier();\n";
    s += "  for (uint h = " + ulit(ly / 2) + "; h > 0u; h >>= 1) {\n";
    s += "    if (ly < h) s_acc[ly * " + LX + " + lx] += s_acc[(ly + h) * " + LX + " + lx];\n";
    s += "    barrier();\n  }\n";
    s += "  acc = s_acc[lx];\n";
  }
  const std::string o = "bz * " + ulit(p_count) + " + p";
  s += split == 1
           ? "  if (ly == 0u && live) C_st(" + o + ", mm_epilogue(acc, bz, " +
                 (left ? "0u, p" : "p, 0u") + "));\n}\n"
           : "  if (ly == 0u && live) part[s * " + ulit(outputs) + " + " + o + "] = acc;\n}\n";

  KernelLaunch k;
  k.name = split == 1 ? "matmul_gemv" : "matmul_gemv_partial";
  k.glsl = std::move(s);
  k.workgroup = {lx, ly, 1};
  k.groups = glsl::linear_grid(static_cast<uint64_t>(total) * lx * ly, ctx.device, lx * ly).groups;
  Lowering l;
  if (split == 1) {
    k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
    if (e) {
      for (const ArgRef& a : e->extra) k.bindings.push_back({a, false});
    }
    l.launches.push_back(std::move(k));
    return l;
  }
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::scratch(0), true}};
  l.launches.push_back(std::move(k));
  l.scratch_bytes.push_back(static_cast<uint64_t>(split * outputs) * 4);
  // The partial sums of each output, added in chunk order.
  const std::string decl =
      "layout(std430, set = 0, binding = 0) readonly buffer Buffer0 { float part[]; };\n" +
      glsl::buffer(1, ctx.node.type.dtype, "C", false) + (e ? e->declarations : std::string()) +
      epilogue_function(e);
  // Output i is batch i / p_count, element p = i % p_count: (m, n) = (0, p) or (p, 0).
  const std::string p_of = "i % " + ulit(p_count), b_of = "i / " + ulit(p_count);
  const std::string body = "  float acc = 0.0;\n  for (uint s = 0u; s < " + ulit(split) +
                           "; ++s) acc += part[s * " + ulit(outputs) +
                           " + i];\n  C_st(i, mm_epilogue(acc, " + b_of + ", " +
                           (left ? "0u, " + p_of : p_of + ", 0u") + "));\n";
  KernelLaunch c =
      glsl::elementwise_launch("matmul_gemv_combine", decl, body, static_cast<uint64_t>(outputs),
                               ctx.device, {{ArgRef::scratch(0), false}, {ArgRef::output(), true}});
  if (e) {
    // Binding 2 is unused (the epilogue's operands start at 3, as in the other kernels).
    c.bindings.push_back({ArgRef::scratch(0), false});
    for (const ArgRef& a : e->extra) c.bindings.push_back({a, false});
  }
  l.launches.push_back(std::move(c));
  return l;
}

// The subgroup kernel serves matrices contiguous along K, unless a long K over few outputs
// would leave the device to a few lanes (the shared-memory kernel splits K there).
bool takes_subgroups(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch) {
  const GemvLayout l = gemv_layout(g);
  const bool few_long = l.p_count * batch < 256 && g.k >= 8192;
  return ctx.device.subgroup_add && l.sk == 1 && g.k > 1 && !few_long;
}

}  // namespace

uint32_t gemv_chain_threads(const DeviceTraits& device, int64_t p, int64_t outs) {
  if (!device.subgroup_add || !device.gemv_chain || p % 4 != 0 || outs < 1) return 0;
  // The largest workgroup that fits: fewest partials for the last workgroup to add.
  for (uint32_t threads =
           std::min<uint32_t>(1024, std::bit_floor(device.max_workgroup_invocations));
       threads >= 64; threads /= 2) {
    const uint32_t width = std::clamp<uint32_t>(device.subgroup_size, 1, threads);
    const int64_t rows = threads / width;
    if (rows % 4 != 0) continue;
    const int64_t partials = (p + rows - 1) / rows;
    const int64_t quads = (outs + threads - 1) / threads * (rows / 4);
    if (partials <= 64 && quads <= 16) return threads;
  }
  return 0;
}

bool gemv_takes_extras(const LowerContext& ctx) {
  const MatmulGeometry g = geometry(ctx);
  const int64_t batch = numel(g.out_batch);
  return g.m == 1 && batch == 1 && takes_subgroups(ctx, g, batch);
}

Lowering lower_gemv(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                    const MatmulEpilogue* e, const GemvExtras* extras) {
  if (takes_subgroups(ctx, g, batch)) {
    return gemv_subgroups(ctx, g, gemv_layout(g), batch, e, extras);
  }
  return gemv_shared_memory(ctx, g, batch, e);
}

}  // namespace mn::codegen
