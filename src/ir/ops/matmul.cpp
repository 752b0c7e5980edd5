// matmul with numpy semantics: batch dims broadcast, a 1-D left operand is a row vector whose axis
// is dropped from the result, a 1-D right operand a column vector likewise. transpose_a/b swap
// the last two axes of an operand first. The reference packs each operand matrix once and runs
// blocked, register-tiled loops accumulating in double.
#include "ir/ops/matmul.h"

#include <algorithm>
#include <string>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"

namespace mn {

namespace {

// Operand shapes after promoting vectors to matrices, and the product's dimensions.
struct MatmulDims {
  Shape a2, b2;  // promoted operand shapes (rank >= 2)
  Shape batch;   // broadcast batch shape of the result
  int64_t m = 0, k = 0, n = 0;
  bool a_vec = false, b_vec = false;

  Shape out_shape() const {
    Shape s = batch;
    if (!a_vec) s.push_back(m);
    if (!b_vec) s.push_back(n);
    return s;
  }
  Shape out2_shape() const {  // the result before the vector axes are dropped
    Shape s = batch;
    s.push_back(m);
    s.push_back(n);
    return s;
  }
};

MatmulDims matmul_dims(const MatmulAttrs& at, std::span<const TensorType> in) {
  const TensorType& a = in[0];
  const TensorType& b = in[1];
  if (a.dtype != b.dtype) shape_fail("matmul", in, "operands of the same dtype");
  if (!is_float(a.dtype)) shape_fail("matmul", in, "float operands");
  if (a.rank() == 0 || b.rank() == 0) shape_fail("matmul", in, "operands of rank >= 1");
  if (at.transpose_a && a.rank() < 2) shape_fail("matmul", in, "rank >= 2 a with transpose_a");
  if (at.transpose_b && b.rank() < 2) shape_fail("matmul", in, "rank >= 2 b with transpose_b");
  MatmulDims d;
  d.a_vec = a.rank() == 1;
  d.b_vec = b.rank() == 1;
  d.a2 = d.a_vec ? Shape{1, a.shape[0]} : a.shape;
  d.b2 = d.b_vec ? Shape{b.shape[0], 1} : b.shape;
  const size_t ra = d.a2.size(), rb = d.b2.size();
  d.m = at.transpose_a ? d.a2[ra - 1] : d.a2[ra - 2];
  const int64_t ka = at.transpose_a ? d.a2[ra - 2] : d.a2[ra - 1];
  const int64_t kb = at.transpose_b ? d.b2[rb - 1] : d.b2[rb - 2];
  d.n = at.transpose_b ? d.b2[rb - 2] : d.b2[rb - 1];
  if (ka != kb) {
    shape_fail("matmul", in,
               "matching inner dimensions (a gives K = " + std::to_string(ka) +
                   ", b gives K = " + std::to_string(kb) + ")");
  }
  d.k = ka;
  try {
    d.batch = broadcast_shapes(Shape(d.a2.begin(), d.a2.end() - 2),
                               Shape(d.b2.begin(), d.b2.end() - 2), "matmul");
  } catch (const ShapeError&) {
    shape_fail("matmul", in, "batch dimensions that broadcast");
  }
  return d;
}

// Copies one operand matrix into row-major [rows, cols] order of its (possibly transposed) view.
void pack(const double* src, int64_t rows, int64_t cols, bool transposed,
          std::vector<double>& dst) {
  dst.resize(static_cast<size_t>(rows * cols));
  if (!transposed) {
    std::copy(src, src + rows * cols, dst.begin());
    return;
  }
  // Stored as [cols, rows].
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) dst[r * cols + c] = src[c * rows + r];
  }
}

constexpr int64_t tile_rows = 4;
constexpr int64_t block_n = 256;
constexpr int64_t block_k = 256;

// c[m, n] = a[m, k] · b[k, n], all row-major, accumulated in double in order of k. A tile of up to
// 4 rows × block_n columns of c is accumulated in a local buffer (it cannot alias a or b, so the
// column loop vectorizes) while one k-panel of b is streamed once per 4 rows of a.
void gemm(const double* a, const double* b, double* c, int64_t m, int64_t k, int64_t n) {
  double acc[tile_rows][block_n];
  for (int64_t j0 = 0; j0 < n; j0 += block_n) {
    const int64_t w = std::min(n - j0, block_n);
    for (int64_t p0 = 0; p0 < k; p0 += block_k) {
      const int64_t p1 = std::min(k, p0 + block_k);
      for (int64_t i0 = 0; i0 < m; i0 += tile_rows) {
        const int64_t rows = std::min(m - i0, tile_rows);
        for (int64_t r = 0; r < tile_rows; ++r) {
          for (int64_t j = 0; j < w; ++j) {
            acc[r][j] = (p0 == 0 || r >= rows) ? 0.0 : c[(i0 + r) * n + j0 + j];
          }
        }
        for (int64_t p = p0; p < p1; ++p) {
          const double* brow = b + p * n + j0;
          const double a0 = a[i0 * k + p];
          const double a1 = rows > 1 ? a[(i0 + 1) * k + p] : 0.0;
          const double a2 = rows > 2 ? a[(i0 + 2) * k + p] : 0.0;
          const double a3 = rows > 3 ? a[(i0 + 3) * k + p] : 0.0;
          for (int64_t j = 0; j < w; ++j) {
            const double bv = brow[j];
            acc[0][j] += a0 * bv;
            acc[1][j] += a1 * bv;
            acc[2][j] += a2 * bv;
            acc[3][j] += a3 * bv;
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          std::copy(acc[r], acc[r] + w, c + (i0 + r) * n + j0);
        }
      }
    }
  }
}

Array eval_matmul(const Node& node, const Array& a, const Array& b) {
  const auto& at = node.attrs.as<MatmulAttrs>();
  const std::array<TensorType, 2> types{a.type(), b.type()};
  const MatmulDims d = matmul_dims(at, types);
  const int64_t m = d.m, k = d.k, n = d.n;
  const int64_t a_size = m * k, b_size = k * n;
  const Shape a_batch(d.a2.begin(), d.a2.end() - 2), b_batch(d.b2.begin(), d.b2.end() - 2);
  std::array<std::vector<int64_t>, 2> strides{ops::broadcast_strides(a_batch, d.batch),
                                              ops::broadcast_strides(b_batch, d.batch)};
  for (auto& s : strides[0]) s *= a_size;
  for (auto& s : strides[1]) s *= b_size;
  Array out(node.type.shape, node.type.dtype);
  std::vector<double> pa, pb;
  const double* last_a = nullptr;
  const double* last_b = nullptr;
  ops::for_each_broadcast<2>(d.batch, strides, [&](int64_t i, const std::array<int64_t, 2>& o) {
    // Broadcast batches reuse the same operand matrix: pack it only when it changes.
    const double* sa = a.data.data() + o[0];
    const double* sb = b.data.data() + o[1];
    if (sa != last_a) pack(sa, m, k, at.transpose_a, pa);
    if (sb != last_b) pack(sb, k, n, at.transpose_b, pb);
    last_a = sa;
    last_b = sb;
    gemm(pa.data(), pb.data(), out.data.data() + i * m * n, m, k, n);
  });
  return out;
}

std::vector<Tensor> matmul_vjp(const Node& node, std::span<const Tensor> in, Tensor g) {
  const auto& at = node.attrs.as<MatmulAttrs>();
  const bool ta = at.transpose_a, tb = at.transpose_b;
  const std::array<TensorType, 2> types{in[0].type(), in[1].type()};
  const MatmulDims d = matmul_dims(at, types);
  // Work on the promoted rank >= 2 forms; vectors never carry a transpose flag.
  Tensor a = d.a_vec ? reshape(in[0], d.a2) : in[0];
  Tensor b = d.b_vec ? reshape(in[1], d.b2) : in[1];
  Tensor g2 = g.shape() == d.out2_shape() ? g : reshape(g, d.out2_shape());
  // With A = op_a(a), B = op_b(b), C = A·B: dA = dC·Bᵀ, dB = Aᵀ·dC, transposed back onto the
  // stored layout when a flag was set.
  Tensor da = ta ? matmul(b, g2, tb, true) : matmul(g2, b, false, !tb);
  da = sum_to(da, d.a2);
  Tensor db;
  if (d.b2.size() == 2 && d.a2.size() > 2 && !ta) {
    // A matrix shared by every batch entry (a Linear's weight): the batch axes of a and dC fold
    // into the rows of one product, instead of a product per entry summed afterwards (a
    // [batch, N, K] temporary: 864 MiB for a tied LM head at 8 × 512 tokens).
    const int64_t k = d.a2.back(), n = d.out2_shape().back();
    Tensor rows_a = reshape(a, {-1, k}), rows_g = reshape(g2, {-1, n});
    db = tb ? matmul(rows_g, rows_a, true, false) : matmul(rows_a, rows_g, true, false);
  } else {
    db = sum_to(tb ? matmul(g2, a, true, ta) : matmul(a, g2, !ta, false), d.b2);
  }
  if (d.a_vec) da = reshape(da, in[0].shape());
  if (d.b_vec) db = reshape(db, in[1].shape());
  return {da, db};
}

std::vector<OpSample> matmul_samples() {
  std::vector<OpSample> s;
  auto add = [&](const char* label, Shape a, Shape b, bool ta = false, bool tb = false,
                 DType t = DType::f32) {
    // Products of 16-bit operands take their cotangent in that type: the gradient is as
    // exact as the type.
    const double tol = t == DType::f16 ? 2e-3 : t == DType::bf16 ? 1.6e-2 : 1e-6;
    s.push_back({.label = label,
                 .inputs = {{std::move(a), t}, {std::move(b), t}},
                 .attrs = MatmulAttrs{ta, tb},
                 .ranges = {{-1, 1}, {-1, 1}},
                 .grad_tolerance = tol});
  };
  add("matrix", {3, 4}, {4, 5});
  add("transpose_a", {4, 3}, {4, 5}, true, false);
  add("transpose_b", {3, 4}, {5, 4}, false, true);
  add("transpose_both", {4, 3}, {5, 4}, true, true);
  add("batch", {2, 3, 4}, {2, 4, 5});
  add("batch_shared_b", {2, 3, 4}, {4, 5});
  add("batch_broadcast", {2, 1, 3, 4}, {3, 4, 2});
  add("batch_broadcast_transposed", {2, 1, 4, 3}, {3, 2, 4}, true, true);
  add("vector_left", {4}, {4, 5});
  add("vector_right", {3, 4}, {4});
  add("dot", {6}, {6});
  add("batch_vector_right", {2, 3, 4}, {4});
  add("vector_left_batch", {4}, {2, 4, 3});
  add("vector_left_transposed_b", {4}, {2, 3, 4}, false, true);
  add("inner_one", {3, 1}, {1, 4});
  // Past one 16×16 tile with K not a multiple of 16; the 64×64 tile with overhanging edges.
  add("ragged_tiles", {20, 37}, {37, 18});
  add("tile64", {65, 17}, {17, 66});
  add("tile64_transposed", {17, 70}, {64, 17}, true, true);
  // Matrix-vector products long enough for the GPU's reduction over K.
  add("vector_right_long", {3, 300}, {300});
  add("vector_left_long", {300}, {300, 5});
  add("f16", {5, 20}, {20, 6}, false, false, DType::f16);
  add("bf16_batch_transposed", {2, 20, 5}, {6, 20}, true, true, DType::bf16);
  return s;
}

}  // namespace

Tensor matmul(Tensor a, Tensor b, bool transpose_a, bool transpose_b) {
  if (!a.valid()) throw Error("matmul: input 0 is an empty Tensor");
  return a.graph().apply("matmul", MatmulAttrs{transpose_a, transpose_b}, {a, b});
}

void register_matmul_ops(OpRegistry& r) {
  r.add({.name = "matmul",
         .arity = 2,
         .archetype = Archetype::matmul,
         .differentiable = true,
         .infer =
             [](const Attrs& attrs, std::span<const TensorType> in) {
               return TensorType{matmul_dims(attrs.as<MatmulAttrs>(), in).out_shape(), in[0].dtype};
             },
         .eval = [](const Node& n,
                    std::span<const Array* const> in) { return eval_matmul(n, *in[0], *in[1]); },
         .vjp = [](const Node& n, std::span<const Tensor> in, Tensor,
                   Tensor g) { return matmul_vjp(n, in, g); },
         .samples = matmul_samples,
         .summary = "matrix product with numpy batch/vector rules and transpose flags"});
}

}  // namespace mn
