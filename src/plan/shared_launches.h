#pragma once
// Launches that compute what an earlier launch of the program already computed run once.
//
// A tensor-core product of f32 operands measures and packs each operand to f16 in scratch
// buffers before it multiplies (codegen/lower_matmul_coop.h). SmolVLA's denoising loop runs the
// same 49 weights through ten steps, and packs each one ten times: ~0.7 GB of memory traffic a
// step at batch 8. Gate and up of a layer each pack the same normed activations. A launch that
// repeats an earlier one (the same shader, grid and operands, none written in between) and
// writes only scratch of its own is dropped, and its scratch's readers read the earlier
// launch's instead: its values are the same bits.
//
// The earlier scratch then lives until the last of those readers. In a program that trains,
// where memory is what bounds the batch, that extension is allowed over at most
// `max_training_distance` launches (a layer's products side by side), or at any distance where
// the launch writes little (`small_scratch_bytes`: a measure's partials); elsewhere without
// limit (a denoising loop keeps its packed weights, half their f32 size, for the whole loop).
#include <vector>

#include "plan/step_plan.h"

namespace mn::plan {

struct SharedLaunchOptions {
  bool trains = false;
  int max_training_distance = 16;
  // Scratch of at most this many bytes (a measure's partial maxima) is shared at any distance
  // in a training step too: an activation measured for its forward product and again for its
  // weight gradient's is measured once.
  uint64_t small_scratch_bytes = 64 * 1024;
};

// Removes repeated launches from `launches` and rebinds their scratch's readers to the earlier
// launch's. Returns, per launch index before the removal, its index after it (-1: removed).
// Launches that bind counters or index slots, or write anything but their own scratch, are
// never removed or matched.
std::vector<int> share_repeated_launches(std::vector<PlannedLaunch>& launches,
                                         const std::vector<PlannedBuffer>& buffers,
                                         const SharedLaunchOptions& options);

}  // namespace mn::plan
