#pragma once
// A lowering's launches as early as their operands allow.
//
// A lowering lists its launches in the order its code builds them: a tensor-core product of two
// f32 operands measures and packs A, then measures and packs B, then multiplies. Run in that
// order, the barriers fall between every pair that touch the same scratch: absmax A | pack A,
// absmax B | pack B | product, four windows where three suffice. Each launch moved to the
// earliest position its dependencies allow (a stable order by dependency level) lets the
// independent ones share a window: absmax A, absmax B | pack A, pack B | product.
#include "codegen/kernel.h"

namespace mn::plan {

// Orders `l.launches` by dependency level, keeping the given order within a level. Launch j
// depends on an earlier launch i where they bind the same operand and either writes it (an
// output or a counter is always written); index-error slots, updated atomically, order nothing.
void order_by_dependency_level(codegen::Lowering& l);

}  // namespace mn::plan
