#pragma once
// Pieces shared by the loss-family lowerings: lower_loss.cpp (the elementwise losses and their
// backward ops) and lower_loss_class.cpp (cross_entropy, nll_loss and their backward ops).
//
// A forward loss is a per-item loss (an element, or a row of class scores) followed by its
// reduction. Small losses run as one workgroup computing every item and summing in a fixed
// order; large ones as a per-item kernel writing a scratch buffer and one workgroup summing it
// (deterministic: no atomics).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"

namespace mn::codegen::loss_lowering {

// Threads of the single workgroups that reduce (a power of two the device allows).
uint32_t reduce_local(const DeviceTraits& d);

// Functions over a workgroup of `local` threads (called in uniform control flow):
//   float wg_sum(float v), float wg_max(float v), uint wg_count(uint v)
// each returning the combination over the workgroup to every thread, in a fixed order.
std::string workgroup_functions(uint32_t local);

// GLSL helpers: mn_nan(), mn_inf(), mn_log(x) (log with log(0) = -inf and NaN below 0) and
// mn_log1p(x) (accurate near 0).
std::string math_functions();

// GLSL for comparing an i32 target with ignore_index: defines `bool ignored(int t)`.
std::string ignored_function(int64_t ignore_index);

// GLSL for the i32 targets of a class loss over `classes` classes: ignored_function plus
//   bool bad_target(int t)  not ignored and outside [0, classes)
//   bool counted(int t)     counted by the mean: not ignored, and with `checked` not bad
// (a bad target is an error: checked, its row is recorded and left out, so the step stays
// finite; unchecked, it gives NaN, as the only sign of it).
std::string target_functions(int64_t ignore_index, int64_t classes, bool checked);

// The per-item losses of a forward loss.
struct ItemLosses {
  // Node inputs bound at bindings 0..inputs.size()-1 of every kernel of the lowering.
  std::vector<int> inputs;
  // The node's index slot follows them at binding inputs.size() (codegen/index_check.h).
  bool index_slot = false;
  // Buffers of those inputs (and the slot) and GLSL defining `float item_loss(uint i)` and,
  // when `counted`, `bool item_counted(uint i)`.
  std::string declarations;
  uint64_t items = 1;
  // The mean divides by the number of counted items (0/0 = NaN), else by `items`.
  bool counted = false;
  // Loads per item: with `items`, decides between one workgroup and two kernels.
  uint64_t cost_per_item = 1;
  // When set, the per-item kernel to use instead of one thread per item calling item_loss: it
  // binds the leading bindings as above and writes item i's loss to element i of `dest`, a
  // float buffer at binding leading_bindings().size() named `dst` (see `dest_buffer`).
  std::function<KernelLaunch(ArgRef dest, DType dest_dtype)> item_kernel;

  // The inputs, then the index slot when there is one.
  std::vector<KernelBinding> leading_bindings() const;
};

// The declaration of the per-item kernel's destination buffer.
std::string dest_buffer(uint32_t binding, DType dtype);

// Launch for one thread per item writing item_loss(i) to `dest` (binding inputs.size()).
KernelLaunch per_item_kernel(const LowerContext& ctx, const ItemLosses& items, ArgRef dest,
                             DType dest_dtype);

// The lowering of a forward loss of the given reduction.
Lowering lower_item_losses(const LowerContext& ctx, const ItemLosses& items, Reduction reduction);

// A single-workgroup kernel writing the number of i32 targets (input `target`, n of them) that
// are counted (`targets`: target_functions) into dest[0], as a float.
KernelLaunch count_kernel(const LowerContext& ctx, int target, uint64_t n,
                          const std::string& targets, ArgRef dest);

void register_class_loss_lowerings(LoweringRegistry& r);  // lower_loss_class.cpp

}  // namespace mn::codegen::loss_lowering
