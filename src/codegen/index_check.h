#pragma once
// Device-side index checks. A kernel that reads indices compares each with its range anyway: it
// never reads or writes outside its tensors (a bad index reads zero, writes a zero row or is
// skipped). With LowerContext::check_indices it also records the first bad index it meets in
// the node's index slot, 16 bytes bound as ArgRef::index_errors() and holding
//   {claimed, element, value, 0}
// (element: the position in the node's index operand). The session reads every slot after the
// step and raises mn::IndexError for the first node in dispatch order that met one
// (runtime/index_check.h). A good step pays one more binding per such kernel: the record is
// only on the path of a bad index.
#include <cstdint>
#include <string>

#include "codegen/kernel.h"

namespace mn::codegen {

inline constexpr uint64_t kIndexSlotBytes = 16;

// GLSL: the slot at `binding` and `void mn_bad_index(uint element, int value)`, which keeps
// the first call of all threads (an atomic claim; later calls leave the slot as it is).
std::string index_slot_glsl(uint32_t binding);

// The statement recording a bad index (when `condition` holds, if given) where ctx checks
// indices; nothing otherwise.
std::string report_bad_index(const LowerContext& ctx, const std::string& element,
                             const std::string& value, const std::string& condition = {});

// The binding of the slot, for a kernel whose GLSL declares it at this position.
inline KernelBinding index_slot_binding() { return {ArgRef::index_errors(), true}; }

}  // namespace mn::codegen
