// Einsum of one or two operands as sums, permutes and one batched matmul: letters of both
// operands kept in the output are the batch, letters of both not kept are contracted, letters
// of one operand are its rows or columns (or summed first when the output drops them).
// Repeated letters within an operand (diagonals) and ellipses are not supported.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

struct Term {
  std::string letters;
  Tensor t;
};

// Sums away the letters of `x` not in `keep`.
Term sum_out(Term x, const std::string& keep) {
  std::vector<int64_t> axes;
  std::string rest;
  for (size_t i = 0; i < x.letters.size(); ++i) {
    if (keep.find(x.letters[i]) == std::string::npos) axes.push_back(static_cast<int64_t>(i));
    else rest += x.letters[i];
  }
  if (!axes.empty()) x.t = sum(x.t, axes);
  x.letters = rest;
  return x;
}

// x permuted to the letter order `order` (a permutation of its letters).
Tensor arranged(const Term& x, const std::string& order) {
  std::vector<int64_t> perm;
  for (char l : order) perm.push_back(static_cast<int64_t>(x.letters.find(l)));
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  return identity ? x.t : permute(x.t, perm);
}

void convert_einsum(NodeContext& c) {
  std::string eq = c.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  if (eq.find("...") != std::string::npos) c.unsupported("ellipses in the equation");
  const auto arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> ins;
  for (size_t start = 0;;) {
    const auto comma = lhs.find(',', start);
    ins.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (ins.size() != c.input_count()) c.fail("the equation names " + std::to_string(ins.size()) + " operands");
  if (ins.size() > 2) c.unsupported("more than two operands");
  std::map<char, int64_t> size;
  std::vector<Term> terms;
  for (size_t i = 0; i < ins.size(); ++i) {
    Tensor t = c.in(i);
    if (static_cast<int>(ins[i].size()) != t.rank()) c.fail("operand " + std::to_string(i) + " has rank " + std::to_string(t.rank()) + ", the equation " + ins[i]);
    for (size_t a = 0; a < ins[i].size(); ++a) {
      const char l = ins[i][a];
      if (!std::isalpha(static_cast<unsigned char>(l))) c.fail(std::string("'") + l + "' is not a letter");
      if (std::count(ins[i].begin(), ins[i].end(), l) > 1) c.unsupported("a repeated letter within an operand (a diagonal)");
      auto [it, fresh] = size.emplace(l, t.dim(static_cast<int>(a)));
      if (!fresh && it->second != t.dim(static_cast<int>(a))) c.fail(std::string("letter '") + l + "' has two sizes");
    }
    terms.push_back({ins[i], t});
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
  } else {  // implicit: the letters that appear once, in alphabetical order
    for (const auto& [l, n] : size) {
      if (std::count(lhs.begin(), lhs.end(), l) == 1) out += l;
    }
  }
  for (char l : out) {
    if (size.count(l) == 0) c.fail(std::string("output letter '") + l + "' is in no operand");
  }
  if (terms.size() == 1) {
    Term t = sum_out(terms[0], out);
    c.out(0, arranged(t, out), c.type(0));
    return;
  }
  Term a = sum_out(terms[0], out + terms[1].letters);
  Term b = sum_out(terms[1], out + terms[0].letters);
  std::string batch, contracted, rows, cols;
  for (char l : a.letters) {
    const bool in_b = b.letters.find(l) != std::string::npos, kept = out.find(l) != std::string::npos;
    (in_b ? (kept ? batch : contracted) : rows) += l;
  }
  for (char l : b.letters) {
    if (a.letters.find(l) == std::string::npos) cols += l;
  }
  auto product = [&](const std::string& ls) {
    int64_t p = 1;
    for (char l : ls) p *= size[l];
    return p;
  };
  Shape batch_shape;
  for (char l : batch) batch_shape.push_back(size[l]);
  Shape a3 = batch_shape, b3 = batch_shape;
  a3.insert(a3.end(), {product(rows), product(contracted)});
  b3.insert(b3.end(), {product(contracted), product(cols)});
  Tensor y = matmul(reshape(arranged(a, batch + rows + contracted), a3),
                    reshape(arranged(b, batch + contracted + cols), b3));
  Shape full = batch_shape;
  for (char l : rows + cols) full.push_back(size[l]);
  Term result{batch + rows + cols, reshape(y, full)};
  c.out(0, arranged(result, out), c.type(0));
}

}  // namespace

void add_einsum_converter(ConverterTable& t) { t.add("Einsum", convert_einsum); }

}  // namespace mn::onnx
