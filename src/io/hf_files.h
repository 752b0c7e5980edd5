#pragma once
// The weight files of a Hugging Face model directory, shared by the causal LMs and the
// vision-language models.
#include <string>
#include <vector>

#include <meganeura/hf.h>

namespace mn::io {

// Adds the tensors of m.dir's model.safetensors, or of the shards its
// model.safetensors.index.json names, to m.tensors. FormatError naming the file otherwise.
void add_weight_files(HfModel& m);
// Every parameter present with its shape and a float dtype, and no other tensor; FormatError
// naming the tensor, the file and `described_as` (the architecture) otherwise.
void check_weight_files(const HfModel& m, const std::vector<ParameterSpec>& params,
                        const std::string& described_as);

}  // namespace mn::io
