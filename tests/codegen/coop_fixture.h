#pragma once
// What the tensor-core lowering tests share: a one-node graph whose lowering context they build,
// and an H200 as the runtime describes it (with and without workgroup-scope matrices).
#include <memory>
#include <string>
#include <vector>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/kernel.h"
#include "ir/op_def.h"

namespace mn::codegen::testing {

// A graph holding one node of interest and the types of its inputs.
struct OneNode {
  Graph g;
  NodeId id = 0;
  std::vector<TensorType> types;
  LowerContext ctx(const DeviceTraits& t) const { return {g.node(id), types, t}; }
  // The node through its op's registered lowering.
  Lowering lower(const DeviceTraits& t) const {
    return (*find_lowering(g.node(id).op->name))(ctx(t));
  }
};

inline std::unique_ptr<OneNode> matmul_node(Shape a, Shape b, bool ta, bool tb,
                                            DType dt = DType::f32) {
  auto m = std::make_unique<OneNode>();
  Tensor x = m->g.input("a", std::move(a), dt);
  Tensor y = m->g.input("b", std::move(b), dt);
  Tensor c = matmul(x, y, ta, tb);
  m->g.output("c", c);
  m->id = c.id();
  m->types = {m->g.node(x.id()).type, m->g.node(y.id()).type};
  return m;
}

// An H200 (subgroup-scope cooperative matrices only).
inline DeviceTraits h200_traits() {
  DeviceTraits t;
  t.subgroup_size = 32;
  t.subgroup_vote = true;
  t.max_workgroup_invocations = 1024;
  t.max_shared_bytes = 49152;
  t.max_group_count = 65535;
  t.storage_16bit = true;
  t.coop = true;
  t.multiprocessors = 132;
  return t;
}

// An H200 with VK_NV_cooperative_matrix2, as its driver lists the workgroup-scope f16·f16+f32
// matrices: 32 and 64 invocations (16, 16, 16), 128 invocations (32, 16, 16), 256 invocations
// (32, 32, 16), dimensions to 1024.
inline DeviceTraits h200_wg_traits() {
  DeviceTraits t = h200_traits();
  t.coop_wg_granularity[0] = {16, 16, 16};
  t.coop_wg_granularity[1] = {16, 16, 16};
  t.coop_wg_granularity[2] = {32, 16, 16};
  t.coop_wg_granularity[3] = {32, 32, 16};
  t.coop_wg_max_dimension = 1024;
  return t;
}

}  // namespace mn::codegen::testing
