#pragma once
// One registration function per family of GPU lowerings (src/codegen/lower_<family>.cpp),
// mirroring the op families of src/ir/ops.
namespace mn::codegen {
class LoweringRegistry;
void register_pointwise_lowerings(LoweringRegistry& r);  // lower_pointwise.cpp
void register_reduce_lowerings(LoweringRegistry& r);     // lower_reduce.cpp
void register_matmul_lowerings(LoweringRegistry& r);     // lower_matmul.cpp
void register_shape_lowerings(LoweringRegistry& r);      // lower_shape.cpp
void register_nn_lowerings(LoweringRegistry& r);         // lower_nn.cpp
void register_conv_lowerings(LoweringRegistry& r);       // lower_conv.cpp
void register_pool_lowerings(LoweringRegistry& r);       // lower_pool.cpp
void register_attention_lowerings(LoweringRegistry& r);  // lower_attention.cpp
void register_attention_training_lowerings(LoweringRegistry& r);  // lower_attention_training.cpp
void register_loss_lowerings(LoweringRegistry& r);       // lower_loss.cpp
void register_cache_lowerings(LoweringRegistry& r);      // lower_cache.cpp
void register_sampling_lowerings(LoweringRegistry& r);   // lower_sampling.cpp
}  // namespace mn::codegen
