#pragma once
// A decoding step's attention splits each head's cached keys over several workgroups, and the
// last of them to finish combines the ranges' partial softmax states into the head's output: a
// count across workgroups, then a second round trip through memory for the partials, inside the
// attention's barrier window (on an H100 about 2 µs a layer of a SmolLM2-135M step). Its output
// has one reader, the output projection, in the next window. Where that reader is a GEMV taking
// the output as its vector, the attention stores its partials as its output instead and the
// GEMV combines them as it loads the vector (codegen::GemvExtras::combine): the combine's loads
// wait behind the barrier the window needs anyway.
#include <vector>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// With DeviceTraits::attention_partials_in_products: marks every single cached_attention group
// whose kernel is the split row kernel of one query a row (attention_lowering::partials_of),
// whose f32 output nothing keeps and exactly one group reads (through reshapes), that group
// being a GEMV without other extras with the output as its vector, of as many elements: the
// attention stores its partials (KernelGroup::attention_partials), the GEMV combines them
// (KernelGroup::Gemv::combine_splits).
void read_attention_partials(const Graph& g, std::vector<KernelGroup>& groups,
                             const codegen::DeviceTraits& device);

}  // namespace mn::schedule
