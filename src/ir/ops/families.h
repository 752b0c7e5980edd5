#pragma once
// One registration function per op family (src/ir/ops/<family>.cpp).
namespace mn {
class OpRegistry;
void register_source_ops(OpRegistry& r);       // source.cpp: input, parameter, constant
void register_elementwise_ops(OpRegistry& r);  // elementwise.cpp
void register_reduce_ops(OpRegistry& r);       // reduce.cpp
void register_matmul_ops(OpRegistry& r);       // matmul.cpp
void register_shape_ops(OpRegistry& r);        // shape.cpp
void register_nn_ops(OpRegistry& r);           // nn.cpp: softmax, norms, dropout
void register_conv_ops(OpRegistry& r);         // conv.cpp
void register_pool_ops(OpRegistry& r);         // pool.cpp: pooling, upsampling
void register_attention_ops(OpRegistry& r);    // attention.cpp: sdpa, rope
void register_attention_training_ops(OpRegistry& r);  // attention_training.cpp: lse, grads
void register_attention_position_ops(OpRegistry& r);  // attention_positions.cpp
void register_sampling_ops(OpRegistry& r);      // sampling.cpp: sample_tokens
void register_loss_ops(OpRegistry& r);         // loss.cpp
void register_cache_ops(OpRegistry& r);        // cache.cpp: cache_write
}  // namespace mn
