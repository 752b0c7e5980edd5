#include "ir/op_def.h"
#include "ir/ops/families.h"

namespace mn {

void register_reduce_ops(OpRegistry& r) {}

}  // namespace mn
