// Det: the determinant of [..., M, M] matrices by the Leibniz sum over permutations (M! terms
// of M factors each, gathered in one take), for M up to 5; larger matrices are refused.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <numeric>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

void convert_det(NodeContext& c) {
  Tensor x = c.in(0);
  if (!is_float_type(c.type(0))) c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)));
  if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2)) c.fail("input must be [..., M, M]");
  const int64_t m = x.dim(x.rank() - 1);
  if (m > 5) c.unsupported("matrices larger than 5 x 5 (" + std::to_string(m) + " x " + std::to_string(m) + ")");
  // Every permutation's entries (row i, column p[i]) as flat indices, and its sign.
  std::vector<int64_t> p(static_cast<size_t>(m));
  std::iota(p.begin(), p.end(), 0);
  std::vector<double> index, sign;
  do {
    int inversions = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = i + 1; j < m; ++j) inversions += p[static_cast<size_t>(i)] > p[static_cast<size_t>(j)];
      index.push_back(static_cast<double>(i * m + p[static_cast<size_t>(i)]));
    }
    sign.push_back(inversions % 2 ? -1.0 : 1.0);
  } while (std::next_permutation(p.begin(), p.end()));
  const auto count = static_cast<int64_t>(sign.size());
  Shape lead = x.shape();
  lead.resize(lead.size() - 2);
  Shape flat = lead;
  flat.push_back(m * m);
  Tensor xf = cast(x, DType::f32);
  // [..., P, M]: entry i of every permutation's product.
  Tensor entries = take(reshape(xf, flat), c.graph().constant(Array({count, m}, DType::i32, index)),
                        static_cast<int64_t>(lead.size()));
  Tensor product = slice(entries, -1, 0, 1);
  for (int64_t i = 1; i < m; ++i) product = product * slice(entries, -1, i, i + 1);
  Shape signs(lead.size(), 1);
  signs.insert(signs.end(), {count, 1});
  Tensor det = sum(product * c.graph().constant(Array(signs, DType::f32, sign)),
                   {static_cast<int64_t>(lead.size()), static_cast<int64_t>(lead.size()) + 1});
  c.out(0, cast(det, x.dtype()), c.type(0));
}

}  // namespace

void add_linalg_converters(ConverterTable& t) { t.add("Det", convert_det); }

}  // namespace mn::onnx
