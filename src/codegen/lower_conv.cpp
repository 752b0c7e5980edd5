#include "codegen/kernel.h"
#include "codegen/lower_families.h"

namespace mn::codegen {

void register_conv_lowerings(LoweringRegistry& r) {}

}  // namespace mn::codegen
