#pragma once
// Matmul problems for the tensor-core tests: their graph node, operands, float64 evaluation
// (batched, broadcast, transposed, with an optional epilogue) and a run of any lowering of
// them on the test device.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <meganeura/graph.h>

#include "codegen/coop_fixture.h"
#include "codegen/kernel.h"
#include "codegen/matmul_epilogue.h"
#include "tensor_cores/f16_model.h"

namespace mn::testing {

enum class Epilogue { none, bias_relu, residual };

struct MatmulProblem {
  std::string tag;
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  int64_t a_batch = 1, b_batch = 1;  // 1 broadcasts over the other's batch
  DType dtype = DType::f32;          // of both operands and the output
  double a_scale = 1, b_scale = 1;   // largest magnitude of each operand
  Epilogue epilogue = Epilogue::none;

  int64_t batch() const { return std::max(a_batch, b_batch); }
  Shape a_shape() const;
  Shape b_shape() const;
  std::string describe() const;
};

// A problem's node, its operands (A, B, then the epilogue's bias [n] or residual [batch, m, n])
// and its model.
struct MatmulRun {
  MatmulProblem p;
  std::unique_ptr<codegen::testing::OneNode> node;
  std::vector<std::vector<double>> operands;
  std::vector<DType> dtypes;
  ProductModel model;
};

MatmulRun prepare(const MatmulProblem& p, uint64_t seed);

// The epilogue the kernel fuses for the problem (null for none), as the scheduler would pass
// it: operands at input 2.
std::unique_ptr<codegen::MatmulEpilogue> epilogue_for(const MatmulProblem& p);

// The float64 batched product of a and b as stored (the problem's layout).
std::vector<double> matmul_f64(const MatmulProblem& p, const std::vector<double>& a,
                               const std::vector<double>& b);

// Runs `l` on the test device (`khr`: through the SPV_KHR rewrite): `operands[i]` is its input
// i in `dtypes[i]`; returns its output of `elements` values of `dtype`.
std::vector<double> run_on_device(const codegen::Lowering& l,
                                  const std::vector<std::vector<double>>& operands,
                                  const std::vector<DType>& dtypes, int64_t elements, DType dtype,
                                  bool khr);
// The same with a matmul run's operands and output.
std::vector<double> run_on_device(const codegen::Lowering& l, const MatmulRun& r, bool khr);

}  // namespace mn::testing
