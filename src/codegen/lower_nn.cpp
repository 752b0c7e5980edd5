#include "codegen/kernel.h"
#include "codegen/lower_families.h"

namespace mn::codegen {

void register_nn_lowerings(LoweringRegistry& r) {}

}  // namespace mn::codegen
