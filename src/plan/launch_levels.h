#pragma once
// Launches as early as their operands allow.
//
// A lowering lists its launches in the order its code builds them: a tensor-core product of two
// f32 operands measures and packs A, then measures and packs B, then multiplies. Run in that
// order, the barriers fall between every pair that touch the same scratch: absmax A | pack A,
// absmax B | pack B | product, four windows where three suffice. Each launch moved to the
// earliest position its dependencies allow (a stable order by dependency level) lets the
// independent ones share a window: absmax A, absmax B | pack A, pack B | product.
//
// Across lowerings the kernel groups keep their order (it bounds what is live at once), but a
// launch that writes only scratch of its own (a weight's measure and pack, ready long before
// its product) may join a window up to a few earlier, where nothing between reads or writes what
// it touches: the up projection's weight packed beside the gate's, not in a window of its own.
#include <vector>

#include "codegen/kernel.h"
#include "plan/step_plan.h"

namespace mn::plan {

// Orders `l.launches` by dependency level, keeping the given order within a level. Launch j
// depends on an earlier launch i where they bind the same operand and either writes it (an
// output or a counter is always written); index-error slots, updated atomically, order nothing.
void order_by_dependency_level(codegen::Lowering& l);

// Per buffer, how many of `launches` write it (an output or a counter binding always writes).
std::vector<int> writers_of(const std::vector<PlannedLaunch>& launches, size_t buffers);

// Whether `l` writes something and only transient scratch (no node's value, nothing
// persistent) that no other launch writes (`writers`: writers_of), binding no counters or index
// slot (their state is shared between workgroups or launches): what it computes is its own,
// so it may run elsewhere or be replaced by a launch computing the same.
bool writes_only_own_scratch(const PlannedLaunch& l, const std::vector<PlannedBuffer>& buffers,
                             const std::vector<int>& writers);

// Moves each launch of `launches` that writes only its own scratch to the end of the earliest of
// the `max_windows` barrier windows before its own that it can join: none of the launches from
// there to it reads what it writes or writes what it reads or writes. The windows are
// barrier_run_ends'. Returns, per launch index before the move, its index after it.
std::vector<int> hoist_scratch_launches(std::vector<PlannedLaunch>& launches,
                                        const std::vector<PlannedBuffer>& buffers,
                                        int max_windows = 2);

// Moves each launch of an end-of-step kernel group (schedule::KernelGroup::tail: an optimizer
// update spread over the backward pass) that would open a barrier window of its own to the next
// window that opens anyway: launched right after the kernel of the gradient it reads, it would
// wait for it behind a barrier and push every launch after it into its window. A deferred launch
// never passes one that touches what it touches. Returns, per launch index before the move, its
// index after it.
std::vector<int> defer_tail_launches(std::vector<PlannedLaunch>& launches,
                                     const std::vector<schedule::KernelGroup>& groups);

}  // namespace mn::plan
